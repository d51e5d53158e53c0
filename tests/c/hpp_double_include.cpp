// A second translation unit including dpattn.hpp (twice, to test the include guard), so
// the test binary links two copies of every inline wrapper: a missing `inline` in the
// header fails with a duplicate-symbol error. (The no-exception configuration,
// DPATTN_HPP_NO_EXCEPTIONS with -fno-exceptions, is compiled by scripts/c-host.sh: mixing
// both configurations in one program would itself break the one-definition rule.)
#include "dpattn.hpp"
#include "dpattn.hpp"

int dpattn_hpp_second_unit(double* sigma_out) {
    dpattn::Result<double> r = dpattn::try_analytic_gaussian_sigma(1.0, 1e-5, 1.0);
    if (!r.ok()) return 1;
    *sigma_out = r.value();
    dpattn::Result<dpattn::Ledger> ledger = dpattn::Ledger::try_zcdp(dpattn::units::token, 0.5);
    if (!ledger.ok()) return 2;
    if (ledger.value().try_charge_zcdp(dpattn::units::token, 0.25) != DPATTN_STATUS_OK) return 3;
    dpattn::Result<dpattn::Session> session = dpattn::Session::try_create(ledger.value());
    return session.ok() && session.value().try_position().ok() ? 0 : 4;
}

extern "C" int dpattn_cpp_hpp_double_include(void) {
    double s = 0.0;
    return dpattn_hpp_second_unit(&s) == 0 && s > 3.0 && s < 4.0 ? 0 : __LINE__;
}
