//! Layout descriptors: where a block's tensors live in a flat parameter buffer, and how
//! they are stored (`docs/PAPERS.md` §2.3).
//!
//! A descriptor names offsets and shapes only; the same descriptors describe the weights,
//! the gradients and every optimizer-state buffer of the same length (Adam moments,
//! momentum, EMA copies), so one [`ShufflePlan`](super::ShufflePlan) permutes them all.
//!
//! **Not describable** (the plan would silently break the model; leave such blocks out of
//! the plan): per-feature parameters on the permuted axis that the descriptors do not list
//! (QK-norm's γ over the head dimension, a LayerNorm on the FFN hidden units), gated MLPs
//! whose gate and up halves share one `(in, out)` matrix (a column half is not a contiguous
//! matrix; describe them as two layers only if they are stored as two), factored optimizer
//! state (Adafactor's row/column vectors are not `param_len` buffers), and LoRA adapters
//! (their factors must be permuted with the base matrix).

/// How a linear layer's weight matrix is stored.
///
/// ```
/// use dpattn_core::weight_shuffle::WeightLayout;
/// // `torch.nn.Linear.weight` is (out, in); HF GPT-2 `Conv1D.weight` is (in, out).
/// assert_ne!(WeightLayout::OutIn, WeightLayout::InOut);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// Row-major `out_features × in_features` (`torch.nn.Linear`, BERT, ViT): output unit
    /// `j` is row `j`.
    OutIn,
    /// Row-major `in_features × out_features` (GPT-2 `Conv1D`): output unit `j` is column
    /// `j`.
    InOut,
}

/// A linear layer `y = x·Wᵀ + b` inside a flat buffer: the weight at element offset
/// `weight` (row-major in `layout`) and, if present, a bias of `out_features` elements at
/// offset `bias`.
///
/// ```
/// use dpattn_core::weight_shuffle::{LinearLayout, WeightLayout};
/// let fc = LinearLayout::new(0, 3072, 768, WeightLayout::OutIn).with_bias(3072 * 768);
/// assert_eq!((fc.weight_len(), fc.bias), (Some(3072 * 768), Some(3072 * 768)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearLayout {
    /// Element offset of the weight matrix.
    pub weight: usize,
    /// Output features (units).
    pub out_features: usize,
    /// Input features.
    pub in_features: usize,
    /// Storage order of the weight.
    pub layout: WeightLayout,
    /// Element offset of the `out_features`-long bias, if the layer has one.
    pub bias: Option<usize>,
}

impl LinearLayout {
    /// A layer without bias.
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::{LinearLayout, WeightLayout};
    /// assert_eq!(LinearLayout::new(10, 4, 2, WeightLayout::InOut).bias, None);
    /// ```
    pub const fn new(
        weight: usize,
        out_features: usize,
        in_features: usize,
        layout: WeightLayout,
    ) -> Self {
        Self { weight, out_features, in_features, layout, bias: None }
    }

    /// The same layer with a bias at element offset `bias`.
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::{LinearLayout, WeightLayout};
    /// assert_eq!(LinearLayout::new(0, 4, 2, WeightLayout::OutIn).with_bias(8).bias, Some(8));
    /// ```
    pub const fn with_bias(mut self, bias: usize) -> Self {
        self.bias = Some(bias);
        self
    }

    /// `out_features · in_features`, or `None` if it overflows `usize`.
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::{LinearLayout, WeightLayout};
    /// assert_eq!(LinearLayout::new(0, usize::MAX, 2, WeightLayout::OutIn).weight_len(), None);
    /// ```
    pub const fn weight_len(&self) -> Option<usize> {
        self.out_features.checked_mul(self.in_features)
    }
}

/// A feed-forward block `down(act(up(x)) [⊙ gate(x)])` whose hidden units are permuted
/// together (Theorem 3; gated MLPs per `docs/PAPERS.md` §2.3): the output units of `up` (and
/// `gate`, with the same permutation) and their biases, and the input features of `down`. The
/// bias of `down` does not move.
///
/// ```
/// use dpattn_core::weight_shuffle::{LinearLayout, MlpBlock, WeightLayout};
/// let (d, h) = (8, 32);
/// let mlp = MlpBlock {
///     up: LinearLayout::new(0, h, d, WeightLayout::OutIn).with_bias(h * d),
///     gate: None,
///     down: LinearLayout::new(h * d + h, d, h, WeightLayout::OutIn),
/// };
/// assert_eq!(mlp.up.out_features, mlp.down.in_features);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpBlock {
    /// The first layer (`d_model → hidden`).
    pub up: LinearLayout,
    /// The gate of a gated MLP (SwiGLU/GLU), `d_model → hidden`, if any.
    pub gate: Option<LinearLayout>,
    /// The second layer (`hidden → d_model`).
    pub down: LinearLayout,
}

/// Where the query, key and value projections are stored.
///
/// ```
/// use dpattn_core::weight_shuffle::{LinearLayout, Qkv, WeightLayout};
/// // GPT-2 `c_attn`: one (in, out) = (768, 2304) matrix, columns Q | K | V.
/// let fused = Qkv::Fused(LinearLayout::new(0, 3 * 768, 768, WeightLayout::InOut));
/// assert!(matches!(fused, Qkv::Fused(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qkv {
    /// Three layers (BERT, ViT): `q` has `heads · qk_head_dim` outputs, `k` has
    /// `kv_heads · qk_head_dim` and `v` `kv_heads · v_head_dim`; head `i` owns outputs
    /// `[i·d, (i+1)·d)`.
    Separate {
        /// Query projection.
        q: LinearLayout,
        /// Key projection.
        k: LinearLayout,
        /// Value projection.
        v: LinearLayout,
    },
    /// One layer whose outputs are the query heads, then the key heads, then the value heads
    /// (GPT-2's `c_attn`). Per-head interleaved fusions (`[q₀ k₀ v₀ q₁ …]`) are a different
    /// layout and must not be described with this variant.
    Fused(LinearLayout),
}

/// The position encoding, which decides whether query/key features may move.
///
/// ```
/// use dpattn_core::weight_shuffle::PositionEncoding;
/// assert_ne!(PositionEncoding::Rotary, PositionEncoding::Additive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionEncoding {
    /// Position information added to the input or to the logits (learned/sinusoidal
    /// embeddings, ALiBi, none): the logits depend on `q·k` only, so each query/key head
    /// gets a feature permutation (Theorem 4's `P₁ᵢ`). Heads themselves are never
    /// reordered, so per-head ALiBi slopes stay valid.
    Additive,
    /// Rotary embeddings (RoPE) rotate fixed feature pairs at distinct frequencies, so no
    /// non-identity feature permutation of a query/key head preserves the logits
    /// (`docs/PAPERS.md` §2.3, "Constraints"): query/key features stay in place and only the
    /// value permutation is used.
    Rotary,
}

/// Which heads share a value permutation `P₂`.
///
/// ```
/// use dpattn_core::weight_shuffle::ValueSharing;
/// assert_ne!(ValueSharing::AllHeads, ValueSharing::PerKvHead);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSharing {
    /// One `P₂` for every head (Theorem 4 as stated in the paper).
    AllHeads,
    /// One `P₂` per key/value head, shared by the query heads that read it (the valid
    /// generalisation of `docs/PAPERS.md` §2.3; with `kv_heads = heads` this is per head).
    PerKvHead,
}

/// A multi-head attention block (Theorem 4, with the extensions of `docs/PAPERS.md` §2.3: biases,
/// grouped-query attention, RoPE). Query head `i` reads key/value head
/// `i / (heads / kv_heads)` (contiguous groups, as in `repeat_kv`).
///
/// Moved: query/key head features (one permutation per key/value head, shared by its
/// query heads; none under [`PositionEncoding::Rotary`]), value head features and the
/// matching input features of the output projection, and the query/key/value biases. The
/// output projection's bias does not move.
///
/// ```
/// use dpattn_core::weight_shuffle::{AttentionBlock, LinearLayout, PositionEncoding, Qkv,
///     ValueSharing, WeightLayout};
/// let (d, heads, dh) = (16, 4, 4);
/// let lin = |at: usize, o: usize, i: usize| LinearLayout::new(at, o, i, WeightLayout::OutIn);
/// let attn = AttentionBlock {
///     qkv: Qkv::Separate { q: lin(0, d, d), k: lin(256, d, d), v: lin(512, d, d) },
///     output: lin(768, d, d),
///     heads, kv_heads: heads, qk_head_dim: dh, v_head_dim: dh,
///     positions: PositionEncoding::Additive, values: ValueSharing::AllHeads,
/// };
/// assert_eq!(attn.heads % attn.kv_heads, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionBlock {
    /// The query/key/value projections.
    pub qkv: Qkv,
    /// The output projection (`heads · v_head_dim → d_model`).
    pub output: LinearLayout,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (`heads` for multi-head attention, fewer for GQA, 1 for MQA); must
    /// divide `heads`.
    pub kv_heads: usize,
    /// Query/key features per head (`d_k`).
    pub qk_head_dim: usize,
    /// Value features per head (`d_v`).
    pub v_head_dim: usize,
    /// The position encoding.
    pub positions: PositionEncoding,
    /// Which heads share a value permutation.
    pub values: ValueSharing,
}

/// One block of a permutation plan.
///
/// ```
/// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, WeightLayout};
/// let b = Block::Mlp(MlpBlock {
///     up: LinearLayout::new(0, 4, 2, WeightLayout::OutIn),
///     gate: None,
///     down: LinearLayout::new(8, 2, 4, WeightLayout::OutIn),
/// });
/// assert!(matches!(b, Block::Mlp(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// A feed-forward block.
    Mlp(MlpBlock),
    /// A multi-head attention block.
    Attention(AttentionBlock),
}
