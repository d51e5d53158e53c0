// dpattn from C++17 through include/dpattn.hpp: RAII handles, exceptions for failures,
// Result<T> for the no-exception style. Exit status 0 when every check passes.
#include <dpattn.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    using dpattn::Shape4;
    const Shape4 shape{1, 2, 8, 16};
    const size_t n = shape[0] * shape[1] * shape[2] * shape[3];
    std::vector<float> q(n), k(n), v(n), out(n);
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

        dpattn::Ledger ledger = dpattn::Ledger::zcdp(0.5);
        ledger.charge_zcdp(0.2);
        ledger.charge_zcdp(0.2);
        std::printf("zCDP ledger: %llu charges\n", static_cast<unsigned long long>(ledger.charges()));
        try {
            ledger.charge_zcdp(0.2);  // 0.6 > 0.5: refused
            std::fprintf(stderr, "over-budget charge was accepted\n");
            return 1;
        } catch (const dpattn::Error& e) {
            std::printf("refused as expected: %s\n", e.what());
        }
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
