// dpattn: differentially private attention — header-only C++17 wrapper over dpattn.h.
//
// * Errors: every wrapper has a throwing form (throws dpattn::Error, which carries the
//   status code and the library's message) and, where it returns a value, a `try_` form
//   returning dpattn::Result<T> (an std::expected-style value-or-error) for code built
//   without exceptions. Define DPATTN_HPP_NO_EXCEPTIONS to remove the throwing forms.
// * Handles: move-only RAII owners (dpattn::Handle<T, Free>); the destructor calls the C
//   `_free`. A moved-from handle is empty. Handles may be shared across threads (the C
//   library serialises calls on one handle), but the owner object itself is not
//   synchronised: do not move or destroy it while another thread uses it.
// * No allocation happens in dpattn itself on the numeric paths; the convenience helpers
//   here allocate their scratch with std::vector.
//
// Everything is `inline` in namespace dpattn, so the header may be included in many
// translation units (tests/c/hpp_double_include_*.cpp prove there are no ODR clashes).
#ifndef DPATTN_HPP
#define DPATTN_HPP

#include "dpattn.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#ifndef DPATTN_HPP_NO_EXCEPTIONS
#include <stdexcept>
#endif

namespace dpattn {

/// The message of the last failed call on this thread ("" after a successful call).
inline std::string last_error() {
    std::string msg(dpattn_last_error_message(nullptr, 0), '\0');
    if (!msg.empty()) {
        // std::string guarantees a writable terminator slot at data()[size()].
        dpattn_last_error_message(&msg[0], msg.size() + 1);
    }
    return msg;
}

/// A failed call: the status code, its static description and the detailed message.
struct Failure {
    dpattn_status status = DPATTN_STATUS_OK;
    std::string message;
};

/// Value or failure (the shape of C++23's std::expected, for C++17 and no-exception builds).
template <class T>
class Result {
  public:
    Result(T value) : value_(std::move(value)) {}
    Result(Failure failure) : failure_(std::move(failure)) {}
    bool ok() const noexcept { return value_.has_value(); }
    explicit operator bool() const noexcept { return ok(); }
    /// The value; only valid when ok().
    const T& value() const& noexcept { return *value_; }
    T& value() & noexcept { return *value_; }
    T&& value() && noexcept { return std::move(*value_); }
    /// DPATTN_STATUS_OK on success.
    dpattn_status status() const noexcept { return failure_.status; }
    const std::string& message() const noexcept { return failure_.message; }

  private:
    std::optional<T> value_;
    Failure failure_;
};

/// The failure of a just-returned status (reads this thread's last-error message).
inline Failure failure(dpattn_status status) { return Failure{status, last_error()}; }

#ifndef DPATTN_HPP_NO_EXCEPTIONS
/// Thrown by the throwing wrappers.
class Error : public std::runtime_error {
  public:
    Error(dpattn_status status, const std::string& message)
        // The library's message already names the failure; the static description stands
        // in when there is none.
        : std::runtime_error(message.empty() ? std::string(dpattn_status_str(status)) : message),
          status_(status) {}
    dpattn_status status() const noexcept { return status_; }

  private:
    dpattn_status status_;
};

/// Throws dpattn::Error unless `status` is DPATTN_STATUS_OK.
inline void check(dpattn_status status) {
    if (status != DPATTN_STATUS_OK) throw Error(status, last_error());
}

/// The value of a Result, or throws its failure.
template <class T>
T unwrap(Result<T> r) {
    if (!r.ok()) throw Error(r.status(), r.message());
    return std::move(r).value();
}
#endif

/// Turns an out-parameter call into a Result: `try_out<double>([&](double* o) { return f(.., o); })`.
template <class T, class F>
Result<T> try_out(F&& call) {
    T value{};
    dpattn_status st = call(&value);
    if (st != DPATTN_STATUS_OK) return failure(st);
    return value;
}

/// Move-only owner of a dpattn handle; `Free` is the handle's C `_free` function.
template <class T, void (*Free)(T*)>
class Handle {
  public:
    Handle() noexcept = default;
    explicit Handle(T* raw) noexcept : raw_(raw) {}
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle(Handle&& o) noexcept : raw_(std::exchange(o.raw_, nullptr)) {}
    Handle& operator=(Handle&& o) noexcept {
        if (this != &o) reset(std::exchange(o.raw_, nullptr));
        return *this;
    }
    ~Handle() { reset(); }
    /// Frees the current handle (if any) and takes `raw`.
    void reset(T* raw = nullptr) noexcept {
        if (raw_) Free(raw_);
        raw_ = raw;
    }
    /// Gives up ownership without freeing.
    T* release() noexcept { return std::exchange(raw_, nullptr); }
    T* get() const noexcept { return raw_; }
    explicit operator bool() const noexcept { return raw_ != nullptr; }

  private:
    T* raw_ = nullptr;
};

/// RAII owners for every handle type of the C ABI.
using LedgerHandle = Handle<dpattn_ledger, dpattn_ledger_free>;
using SoftmaxTreeCrossAttention =
    Handle<dpattn_softmax_tree_cross_attention, dpattn_softmax_tree_cross_attention_free>;
using MomentSketch = Handle<dpattn_moment_sketch, dpattn_moment_sketch_free>;
using DpTree = Handle<dpattn_dp_tree, dpattn_dp_tree_free>;
using DpTreeDistance = Handle<dpattn_dp_tree_distance, dpattn_dp_tree_distance_free>;
using DpTreeHighDim = Handle<dpattn_dp_tree_high_dim, dpattn_dp_tree_high_dim_free>;
using TaylorFeatureMap = Handle<dpattn_taylor_feature_map, dpattn_taylor_feature_map_free>;
using SoftmaxTree = Handle<dpattn_softmax_tree, dpattn_softmax_tree_free>;
using SoftmaxTreeAdaptive = Handle<dpattn_softmax_tree_adaptive, dpattn_softmax_tree_adaptive_free>;
using ShufflePlan = Handle<dpattn_shuffle_plan, dpattn_shuffle_plan_free>;
using ShufflePerms = Handle<dpattn_shuffle_perms, dpattn_shuffle_perms_free>;

/// Creates a handle with any C constructor whose last argument is `T**`:
/// `auto tree = dpattn::make<dpattn::DpTree>(dpattn_dp_tree_new, args...);`
template <class H, class Ctor, class... Args>
Result<H> try_make(Ctor ctor, Args... args) {
    decltype(std::declval<H>().get()) raw = nullptr;
    dpattn_status st = ctor(args..., &raw);
    if (st != DPATTN_STATUS_OK) return failure(st);
    return H(raw);
}
#ifndef DPATTN_HPP_NO_EXCEPTIONS
template <class H, class Ctor, class... Args>
H make(Ctor ctor, Args... args) {
    return unwrap(try_make<H>(ctor, args...));
}
#endif

// ---- element types and tensors -------------------------------------------------------

/// The dpattn dtype of a C++ element type (uint16_t carries f16 or bf16 bits: pass the
/// dtype explicitly for those).
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
    static constexpr dpattn_dtype value = DPATTN_DTYPE_F32;
};
template <>
struct dtype_of<double> {
    static constexpr dpattn_dtype value = DPATTN_DTYPE_F64;
};

using Shape4 = std::array<size_t, 4>;

/// Row-major strides of a dense [batch, heads, seq, dim] tensor.
inline Shape4 contiguous_strides(const Shape4& s) {
    return Shape4{s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
}

/// A read-only tensor over caller memory with explicit strides (in elements).
template <class T>
dpattn_tensor4 tensor(const T* data, size_t len, const Shape4& shape, const Shape4& strides,
                      dpattn_dtype dtype = dtype_of<T>::value) {
    dpattn_tensor4 t{};
    t.data = data;
    t.len = len;
    t.dtype = dtype;
    for (int i = 0; i < 4; i++) {
        t.shape[i] = shape[i];
        t.strides[i] = strides[i];
    }
    return t;
}
/// A read-only dense (row-major) tensor over caller memory.
template <class T>
dpattn_tensor4 tensor(const T* data, size_t len, const Shape4& shape,
                      dpattn_dtype dtype = dtype_of<T>::value) {
    return tensor(data, len, shape, contiguous_strides(shape), dtype);
}
template <class T>
dpattn_tensor4 tensor(const std::vector<T>& v, const Shape4& shape) {
    return tensor(v.data(), v.size(), shape);
}

/// A writable tensor over caller memory.
template <class T>
dpattn_tensor4_mut tensor_mut(T* data, size_t len, const Shape4& shape,
                              const Shape4& strides, dpattn_dtype dtype = dtype_of<T>::value) {
    dpattn_tensor4_mut t{};
    t.data = data;
    t.len = len;
    t.dtype = dtype;
    for (int i = 0; i < 4; i++) {
        t.shape[i] = shape[i];
        t.strides[i] = strides[i];
    }
    return t;
}
template <class T>
dpattn_tensor4_mut tensor_mut(std::vector<T>& v, const Shape4& shape) {
    return tensor_mut(v.data(), v.size(), shape, contiguous_strides(shape));
}

// ---- noise ---------------------------------------------------------------------------

/// A 256-bit key from 32 bytes.
inline dpattn_key key_from_bytes(const std::array<uint8_t, 32>& bytes) {
    dpattn_key k{};
    for (size_t i = 0; i < 32; i++) k.bytes[i] = bytes[i];
    return k;
}

#ifndef DPATTN_HPP_NO_EXCEPTIONS
/// Fills `out` with N(0, sigma²) noise for logical indices first_index.. of (key, stream).
template <class T>
void fill_gaussian(const dpattn_key& key, uint64_t stream, uint64_t first_index, double sigma,
                   std::vector<T>& out) {
    check(dpattn_fill_gaussian(&key, stream, first_index, sigma, dtype_of<T>::value,
                               out.data(), out.size()));
}
#endif

// ---- attention -----------------------------------------------------------------------

/// Scratch elements (float) for exact attention with key dim d and value dim d_v.
inline Result<size_t> try_attention_scratch_len(size_t d, size_t d_v) {
    return try_out<size_t>([&](size_t* o) { return dpattn_attention_scratch_len(d, d_v, o); });
}

/// Default attention options (softmax, 1/sqrt(d), no mask, automatic kernel).
inline dpattn_attention_options attention_options() {
    dpattn_attention_options o{};
    dpattn_attention_options_default(&o);
    return o;
}

/// Exact attention, reusing a caller-owned scratch vector (grown when too small).
inline dpattn_status attention(const dpattn_tensor4_mut& out, const dpattn_tensor4& q,
                               const dpattn_tensor4& k, const dpattn_tensor4& v,
                               const dpattn_attention_options& options,
                               std::vector<float>& scratch) {
    size_t need = 0;
    dpattn_status st = dpattn_attention_scratch_len(q.shape[3], v.shape[3], &need);
    if (st != DPATTN_STATUS_OK) return st;
    if (scratch.size() < need) scratch.resize(need);
    return dpattn_attention(&out, &q, &k, &v, &options, scratch.data(), scratch.size());
}

// ---- calibration and accounting ------------------------------------------------------

/// σ of the analytic Gaussian mechanism (Balle & Wang 2018) for (ε, δ) and L2 sensitivity.
inline Result<double> try_analytic_gaussian_sigma(double epsilon, double delta,
                                                  double sensitivity) {
    return try_out<double>([&](double* o) {
        return dpattn_analytic_gaussian_sigma(epsilon, delta, sensitivity, o);
    });
}

// ---- privacy units, ledgers, sessions --------------------------------------------------

/// What neighbouring inputs differ in (dpattn_privacy_unit). A ledger is kept for one unit
/// and refuses charges about another (DPATTN_STATUS_UNIT_MISMATCH); a guarantee for up to c
/// tokens also covers a ledger for fewer.
namespace units {
/// Up to `c >= 1` tokens of one private context or sequence.
inline constexpr dpattn_privacy_unit tokens(uint32_t c) { return dpattn_privacy_unit{DPATTN_UNIT_TOKENS, c}; }
/// One token (output perturbation, paper 001).
inline constexpr dpattn_privacy_unit token = dpattn_privacy_unit{DPATTN_UNIT_TOKENS, 1};
/// One feature column (paper 000, the Gram-matrix attention).
inline constexpr dpattn_privacy_unit feature_column = dpattn_privacy_unit{DPATTN_UNIT_FEATURE_COLUMN, 0};
/// One whole sequence (DP-Forward's sequence level).
inline constexpr dpattn_privacy_unit sequence = dpattn_privacy_unit{DPATTN_UNIT_SEQUENCE, 0};
/// One training prompt (NoisyHead).
inline constexpr dpattn_privacy_unit prompt = dpattn_privacy_unit{DPATTN_UNIT_PROMPT, 0};
/// One training record, added or removed (DP-SGD).
inline constexpr dpattn_privacy_unit record = dpattn_privacy_unit{DPATTN_UNIT_RECORD, 0};
}  // namespace units

/// Whether two units are the same (kind and token count).
inline bool same_unit(const dpattn_privacy_unit& a, const dpattn_privacy_unit& b) noexcept {
    return a.kind == b.kind && a.tokens == b.tokens;
}

class Session;

/// A privacy-budget ledger for one privacy unit (RAII over dpattn_ledger). Charges name the
/// unit of the mechanism they pay for; a charge for another unit is refused and changes
/// nothing. Releases charge it through a dpattn::Session.
class Ledger {
  public:
    /// (ε, δ) ledger composing charges by basic composition.
    static Result<Ledger> try_approx(dpattn_privacy_unit unit, double epsilon, double delta) {
        return wrap(try_make<LedgerHandle>(dpattn_ledger_new_approx, unit, epsilon, delta));
    }
    /// zCDP ledger with total ρ.
    static Result<Ledger> try_zcdp(dpattn_privacy_unit unit, double rho) {
        return wrap(try_make<LedgerHandle>(dpattn_ledger_new_zcdp, unit, rho));
    }
    /// RDP ledger targeting (ε, δ).
    static Result<Ledger> try_rdp(dpattn_privacy_unit unit, double epsilon, double delta) {
        return wrap(try_make<LedgerHandle>(dpattn_ledger_new_rdp, unit, epsilon, delta));
    }
    /// Charges an (ε, δ) release protecting `unit`; a refused charge leaves the ledger
    /// unchanged.
    dpattn_status try_charge_approx(dpattn_privacy_unit unit, double epsilon, double delta) {
        return dpattn_ledger_charge_approx(h_.get(), unit, epsilon, delta);
    }
    dpattn_status try_charge_zcdp(dpattn_privacy_unit unit, double rho) {
        return dpattn_ledger_charge_zcdp(h_.get(), unit, rho);
    }
    dpattn_status try_charge_sampled_gaussian(dpattn_privacy_unit unit, double q,
                                              double noise_multiplier, uint64_t steps) {
        return dpattn_ledger_charge_sampled_gaussian(h_.get(), unit, q, noise_multiplier, steps);
    }
    Result<dpattn_privacy_unit> try_unit() const {
        return try_out<dpattn_privacy_unit>(
            [&](dpattn_privacy_unit* o) { return dpattn_ledger_unit(h_.get(), o); });
    }
    Result<dpattn_amount> try_spent() const {
        return try_out<dpattn_amount>([&](dpattn_amount* o) { return dpattn_ledger_spent(h_.get(), o); });
    }
    Result<dpattn_amount> try_remaining() const {
        return try_out<dpattn_amount>(
            [&](dpattn_amount* o) { return dpattn_ledger_remaining(h_.get(), o); });
    }
    Result<dpattn_amount> try_total() const {
        return try_out<dpattn_amount>([&](dpattn_amount* o) { return dpattn_ledger_total(h_.get(), o); });
    }
    Result<uint64_t> try_charges() const {
        return try_out<uint64_t>([&](uint64_t* o) { return dpattn_ledger_charges(h_.get(), o); });
    }
#ifndef DPATTN_HPP_NO_EXCEPTIONS
    static Ledger approx(dpattn_privacy_unit unit, double epsilon, double delta) {
        return unwrap(try_approx(unit, epsilon, delta));
    }
    static Ledger zcdp(dpattn_privacy_unit unit, double rho) { return unwrap(try_zcdp(unit, rho)); }
    static Ledger rdp(dpattn_privacy_unit unit, double epsilon, double delta) {
        return unwrap(try_rdp(unit, epsilon, delta));
    }
    void charge_approx(dpattn_privacy_unit unit, double epsilon, double delta) {
        check(try_charge_approx(unit, epsilon, delta));
    }
    void charge_zcdp(dpattn_privacy_unit unit, double rho) { check(try_charge_zcdp(unit, rho)); }
    void charge_sampled_gaussian(dpattn_privacy_unit unit, double q, double noise_multiplier,
                                 uint64_t steps) {
        check(try_charge_sampled_gaussian(unit, q, noise_multiplier, steps));
    }
    dpattn_privacy_unit unit() const { return unwrap(try_unit()); }
    dpattn_amount spent() const { return unwrap(try_spent()); }
    dpattn_amount remaining() const { return unwrap(try_remaining()); }
    dpattn_amount total() const { return unwrap(try_total()); }
    uint64_t charges() const { return unwrap(try_charges()); }
#endif
    dpattn_ledger* get() const noexcept { return h_.get(); }

  private:
    friend class Session;
    explicit Ledger(LedgerHandle h) : h_(std::move(h)) {}
    static Result<Ledger> wrap(Result<LedgerHandle> h) {
        if (!h.ok()) return Failure{h.status(), h.message()};
        return Ledger(std::move(h).value());
    }
    LedgerHandle h_;
};

using SessionHandle = Handle<dpattn_session, dpattn_session_free>;

/// Where a session stands: its epoch and the first stream id of its next release (public;
/// log them beside each release so an auditor holding the master key can replay it).
struct Position {
    uint64_t epoch = 0;
    uint64_t next_stream = 0;
};

/// A session (RAII over dpattn_session): the master key every release draws its noise from
/// (from the operating system), the next unused stream id, and the ledger every release is
/// charged to. Each release takes fresh stream ids, so no two releases share noise. The
/// session holds its own reference to the ledger: the dpattn::Ledger may be destroyed
/// first, and may keep being queried while the session charges it.
class Session {
  public:
    /// A new session charging `ledger`, with a master key and an epoch from the operating
    /// system.
    static Result<Session> try_create(const Ledger& ledger) {
        Result<SessionHandle> h = try_make<SessionHandle>(dpattn_session_new, ledger.get());
        if (!h.ok()) return Failure{h.status(), h.message()};
        return Session(std::move(h).value());
    }
    /// **For replay and audit only**: a session reissuing the stream ids of a past run — the
    /// master key at `epoch`, next stream id `next_stream` (the Position logged before the
    /// release to replay). With no ledger nothing is charged. Never use it for new
    /// releases: their noise would repeat the past run's.
    static Result<Session> try_for_replay(const dpattn_key& master_key, uint64_t epoch,
                                          uint64_t next_stream, const Ledger* ledger = nullptr) {
        Result<SessionHandle> h = try_make<SessionHandle>(
            dpattn_session_new_for_replay, &master_key, epoch, next_stream,
            ledger ? ledger->get() : static_cast<dpattn_ledger*>(nullptr));
        if (!h.ok()) return Failure{h.status(), h.message()};
        return Session(std::move(h).value());
    }
    /// A restored session and the ledger it charges (a new handle holding the saved ledger).
    struct Restored;
    /// Rebuilds a session from save()'s bytes **in a fresh epoch**, so no (key, stream)
    /// pair used before can be reissued. Restore only the newest save: an older one forgets
    /// the budget spent after it.
    static Result<Restored> try_restore(const std::vector<uint8_t>& state);

    Result<Position> try_position() const {
        Position p;
        dpattn_status st = dpattn_session_position(h_.get(), &p.epoch, &p.next_stream);
        if (st != DPATTN_STATUS_OK) return failure(st);
        return p;
    }
    /// The state for a restart: master key, next stream id, a snapshot of the ledger.
    /// **It holds the master key: store it like the key.** Keep only the newest, written
    /// before each release is returned.
    Result<std::vector<uint8_t>> try_save() const {
        std::vector<uint8_t> bytes(dpattn_session_state_len());
        dpattn_status st = dpattn_session_save(h_.get(), bytes.data(), bytes.size());
        if (st != DPATTN_STATUS_OK) return failure(st);
        return bytes;
    }
    /// The master key, **for a key store and for audit only** (as sensitive as the data).
    Result<dpattn_key> try_master_key() const {
        return try_out<dpattn_key>([&](dpattn_key* o) { return dpattn_session_master_key(h_.get(), o); });
    }
#ifndef DPATTN_HPP_NO_EXCEPTIONS
    /// A new session charging `ledger` (a master key from the operating system).
    explicit Session(const Ledger& ledger) : Session(unwrap(try_create(ledger))) {}
    static Session for_replay(const dpattn_key& master_key, uint64_t epoch, uint64_t next_stream,
                              const Ledger* ledger = nullptr) {
        return unwrap(try_for_replay(master_key, epoch, next_stream, ledger));
    }
    static Restored restore(const std::vector<uint8_t>& state);
    Position position() const { return unwrap(try_position()); }
    std::vector<uint8_t> save() const { return unwrap(try_save()); }
    dpattn_key master_key() const { return unwrap(try_master_key()); }
#endif
    dpattn_session* get() const noexcept { return h_.get(); }

  private:
    explicit Session(SessionHandle h) : h_(std::move(h)) {}
    SessionHandle h_;
};

struct Session::Restored {
    Session session;
    Ledger ledger;
};

inline Result<Session::Restored> Session::try_restore(const std::vector<uint8_t>& state) {
    dpattn_session* s = nullptr;
    dpattn_ledger* l = nullptr;
    dpattn_status st = dpattn_session_restore(state.data(), state.size(), &s, &l);
    if (st != DPATTN_STATUS_OK) return failure(st);
    return Restored{Session(SessionHandle(s)), Ledger(LedgerHandle(l))};
}
#ifndef DPATTN_HPP_NO_EXCEPTIONS
inline Session::Restored Session::restore(const std::vector<uint8_t>& state) {
    return unwrap(try_restore(state));
}
#endif

// ---- releases (each draws from and charges a Session) --------------------------------

/// Output-perturbation DP attention (one token's key and value rows are private; the
/// session's ledger must be kept for dpattn::units::token): `out = attention(q, clamp(k),
/// clamp(v)) + noise`. `sigma` receives the noise scale of each (batch, head) and
/// `scratch` the kernel's working memory; both are resized as needed. Returns the status
/// (`out` untouched on failure).
inline dpattn_status try_output_perturbation_attention(
    const dpattn_tensor4_mut& out, const dpattn_tensor4& q, const dpattn_tensor4& k,
    const dpattn_tensor4& v, const dpattn_output_perturbation_params& params, Session& session,
    std::vector<double>& sigma, std::vector<float>& scratch) {
    size_t need = 0;
    dpattn_status st = dpattn_output_perturbation_scratch_len(q.shape[3], v.shape[3], &need);
    if (st != DPATTN_STATUS_OK) return st;
    if (scratch.size() < need) scratch.resize(need);
    if (sigma.size() < q.shape[0] * q.shape[1]) sigma.resize(q.shape[0] * q.shape[1]);
    return dpattn_output_perturbation_attention(&out, &q, &k, &v, &params, session.get(),
                                                sigma.data(), sigma.size(), scratch.data(),
                                                scratch.size());
}

/// Paper 000's Gaussian-sampling attention (one feature column is private; the session's
/// ledger must be kept for dpattn::units::feature_column). Returns the private report
/// (data holder only). `scratch` is resized as needed.
inline Result<dpattn_gaussian_sampling_report> try_gaussian_sampling_attention(
    const dpattn_tensor4_mut& out_b, const dpattn_tensor4_mut& out_p, const dpattn_tensor4& x,
    const dpattn_gaussian_sampling_params& params, Session& session, std::vector<double>& scratch) {
    size_t need = 0;
    dpattn_status st = dpattn_gaussian_sampling_attention_scratch_len(
        x.shape[2], x.shape[3], params.sampler, params.out_of_domain, &need);
    if (st != DPATTN_STATUS_OK) return failure(st);
    if (scratch.size() < need) scratch.resize(need);
    return try_out<dpattn_gaussian_sampling_report>([&](dpattn_gaussian_sampling_report* o) {
        return dpattn_gaussian_sampling_attention(&out_b, &out_p, &x, &params, session.get(),
                                                  scratch.data(), scratch.size(), o);
    });
}

/// The DP-Forward hook, in place on `rows × cols` hidden states of `x` (row stride
/// `row_stride`, float or double; the session's ledger must be kept for the plan's unit:
/// dpattn::units::sequence, or tokens(c) with c <= neighbour_rows at token level). Returns
/// the clip report (private). `scratch` is resized as needed.
template <class T>
Result<dpattn_dp_forward_clip_report> try_dp_forward(T* x, size_t len, size_t rows, size_t cols,
                                                     size_t row_stride,
                                                     const dpattn_dp_forward_params& params,
                                                     const dpattn_dp_forward_factors& factors,
                                                     Session& session, std::vector<double>& scratch) {
    size_t need = 0;
    dpattn_status st = dpattn_dp_forward_scratch_len(&factors, params.tokens, params.dim, &need);
    if (st != DPATTN_STATUS_OK) return failure(st);
    if (scratch.size() < need) scratch.resize(need);
    return try_out<dpattn_dp_forward_clip_report>([&](dpattn_dp_forward_clip_report* o) {
        return dpattn_dp_forward(x, len, dtype_of<T>::value, rows, cols, row_stride, &params,
                                 &factors, session.get(), scratch.data(), scratch.size(), o);
    });
}
/// try_dp_forward over a dense row-major vector of `rows × params.dim` values.
template <class T>
Result<dpattn_dp_forward_clip_report> try_dp_forward(std::vector<T>& x,
                                                     const dpattn_dp_forward_params& params,
                                                     const dpattn_dp_forward_factors& factors,
                                                     Session& session, std::vector<double>& scratch) {
    const size_t rows = params.dim == 0 ? 0 : x.size() / params.dim;
    return try_dp_forward(x.data(), x.size(), rows, params.dim, params.dim, params, factors,
                          session, scratch);
}

#ifndef DPATTN_HPP_NO_EXCEPTIONS
inline void output_perturbation_attention(const dpattn_tensor4_mut& out, const dpattn_tensor4& q,
                                          const dpattn_tensor4& k, const dpattn_tensor4& v,
                                          const dpattn_output_perturbation_params& params,
                                          Session& session, std::vector<double>& sigma,
                                          std::vector<float>& scratch) {
    check(try_output_perturbation_attention(out, q, k, v, params, session, sigma, scratch));
}
inline dpattn_gaussian_sampling_report gaussian_sampling_attention(
    const dpattn_tensor4_mut& out_b, const dpattn_tensor4_mut& out_p, const dpattn_tensor4& x,
    const dpattn_gaussian_sampling_params& params, Session& session, std::vector<double>& scratch) {
    return unwrap(try_gaussian_sampling_attention(out_b, out_p, x, params, session, scratch));
}
template <class T>
dpattn_dp_forward_clip_report dp_forward(std::vector<T>& x, const dpattn_dp_forward_params& params,
                                         const dpattn_dp_forward_factors& factors, Session& session,
                                         std::vector<double>& scratch) {
    return unwrap(try_dp_forward(x, params, factors, session, scratch));
}
#endif

}  // namespace dpattn

#endif  // DPATTN_HPP
