// Compiles include/dpattn.h as C++17 (-Wall -Wextra -Werror) and calls it, so the header's
// extern "C" guards and enum typing are proven for C++ hosts. Run from `cargo test`.
#include "dpattn.h"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

extern "C" int dpattn_cpp_abi_smoke(void) {
    static_assert(sizeof(dpattn_status) == 4, "status is 32-bit");
    static_assert(std::is_same<std::underlying_type<dpattn_status>::type, uint32_t>::value,
                  "status enum is uint32_t-backed");
    if (std::string(dpattn_version()) != DPATTN_VERSION) return __LINE__;
    if (dpattn_check_privacy_params(0.5, 1e-6) != DPATTN_STATUS_OK) return __LINE__;
    if (dpattn_check_privacy_params(0.5, std::nan("")) != DPATTN_STATUS_OUT_OF_RANGE) return __LINE__;
    std::string msg(dpattn_last_error_message(nullptr, 0), '\0');
    if (msg.empty()) return __LINE__;
    // std::string guarantees a writable terminator slot at data()[size()].
    if (dpattn_last_error_message(&msg[0], msg.size() + 1) != msg.size()) return __LINE__;
    if (msg.find("delta") == std::string::npos) return __LINE__;
    // Sessions and units from C++ through the plain C header.
    const dpattn_privacy_unit sequence{DPATTN_UNIT_SEQUENCE, 0};
    dpattn_ledger* ledger = nullptr;
    dpattn_session* session = nullptr;
    if (dpattn_ledger_new_zcdp(sequence, 1.0, &ledger) != DPATTN_STATUS_OK) return __LINE__;
    if (dpattn_session_new(ledger, &session) != DPATTN_STATUS_OK) return __LINE__;
    if (dpattn_ledger_charge_zcdp(ledger, dpattn_privacy_unit{DPATTN_UNIT_RECORD, 0}, 0.1) !=
        DPATTN_STATUS_UNIT_MISMATCH)
        return __LINE__;
    dpattn_session_free(session);
    dpattn_ledger_free(ledger);
    return 0;
}
