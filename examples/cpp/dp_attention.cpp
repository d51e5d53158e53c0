// dpattn from C++17 through include/dpattn.hpp: RAII handles, exceptions for failures,
// Result<T> for the no-exception style, and DP attention the safe way — a ledger for the
// mechanism's privacy unit and a dpattn::Session whose master key comes from the operating
// system. Exit status 0 when every check passes.
#include <dpattn.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    using dpattn::Shape4;
    const Shape4 shape{1, 2, 8, 16};
    const size_t n = shape[0] * shape[1] * shape[2] * shape[3];
    std::vector<float> q(n), k(n), v(n), out(n);
    // A fixed key for the example's *inputs* only (reproducible data); DP releases draw their
    // noise from a session's secret key.
    const dpattn_key key = dpattn::key_from_bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                                   17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                                                   30, 31, 32});
    try {
        dpattn::fill_gaussian(key, 1, 0, 1.0, q);
        dpattn::fill_gaussian(key, 2, 0, 1.0, k);
        dpattn::fill_gaussian(key, 3, 0, 1.0, v);

        // Causal attention; each output row is a convex combination of value rows, so it
        // lies inside their per-column range.
        dpattn_attention_options opts = dpattn::attention_options();
        opts.causal = 1;
        std::vector<float> scratch;
        dpattn::check(dpattn::attention(dpattn::tensor_mut(out, shape), dpattn::tensor(q, shape),
                                        dpattn::tensor(k, shape), dpattn::tensor(v, shape), opts,
                                        scratch));
        // Causal row 0 sees only key 0: its output equals value row 0 exactly up to f32.
        for (size_t c = 0; c < shape[3]; c++) {
            if (std::fabs(out[c] - v[c]) > 1e-6f) {
                std::fprintf(stderr, "causal row 0 differs at column %zu\n", c);
                return 1;
            }
        }

        // DP attention: output perturbation protects one token's key and value rows, so the
        // ledger is kept for one token. The session draws each release's noise from a
        // master key of the operating system at fresh stream ids and charges the ledger.
        dpattn::Ledger ledger = dpattn::Ledger::approx(dpattn::units::token, 2.0, 1e-5);
        dpattn::Session session(ledger);
        dpattn_output_perturbation_params p{};
        dpattn_output_perturbation_params_default(&p);
        p.key_norm = 6.0;  // public bounds: longer rows are clamped
        p.value_norm = 6.0;
        p.epsilon = 1.0;
        p.delta = 1e-6;
        std::vector<double> sigma;
        std::vector<float> op_scratch;
        for (int r = 0; r < 2; r++) {
            // Log the (public) position with each release: with the master key an auditor
            // replays it (dpattn::Session::for_replay).
            const dpattn::Position at = session.position();
            dpattn::output_perturbation_attention(dpattn::tensor_mut(out, shape), dpattn::tensor(q, shape),
                                                  dpattn::tensor(k, shape), dpattn::tensor(v, shape), p,
                                                  session, sigma, op_scratch);
            std::printf("release at stream id %llu: noise scale %.4g\n",
                        static_cast<unsigned long long>(at.next_stream), sigma[0]);
        }
        // A restartable service saves the session (it holds the master key: store it like
        // the key) and keeps only the newest save; restore starts a fresh epoch.
        const std::vector<uint8_t> state = session.save();
        dpattn::Session::Restored restored = dpattn::Session::restore(state);
        std::printf("restored: %llu charges, new epoch: %s\n",
                    static_cast<unsigned long long>(restored.ledger.charges()),
                    restored.session.position().epoch != session.position().epoch ? "yes" : "no");
        try {
            // Budget (2, 1e-5) holds two (1, 1e-6) releases: the third is refused.
            dpattn::output_perturbation_attention(dpattn::tensor_mut(out, shape), dpattn::tensor(q, shape),
                                                  dpattn::tensor(k, shape), dpattn::tensor(v, shape), p,
                                                  session, sigma, op_scratch);
            std::fprintf(stderr, "over-budget release was accepted\n");
            return 1;
        } catch (const dpattn::Error& e) {
            std::printf("refused as expected: %s\n", e.what());
            if (e.status() != DPATTN_STATUS_INFEASIBLE) return 1;
        }
        if (ledger.charges() != 2) return 1;
    } catch (const dpattn::Error& e) {
        std::fprintf(stderr, "dpattn error: %s\n", e.what());
        return 1;
    }

    // The no-exception style.
    dpattn::Result<double> sigma = dpattn::try_analytic_gaussian_sigma(1.0, 2.0, 1.0);
    if (sigma.ok() || sigma.status() != DPATTN_STATUS_OUT_OF_RANGE) return 1;
    std::printf("delta = 2 rejected: %s\n", sigma.message().c_str());
    std::printf("C++ example: all checks passed\n");
    return 0;
}
