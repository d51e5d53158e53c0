//! Reproduction tests of the papers' experiments: the mechanisms of `dpattn-core` run on the
//! papers' configurations and synthetic data (`dpattn-paper`), against the reference values of
//! `docs/PAPERS.md`. One test binary; each module is one experiment family.

mod noisy_head_simulations;
