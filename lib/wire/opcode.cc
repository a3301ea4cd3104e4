#include "wire/opcode.h"

#include "wire/headers.h"

namespace uroce::wire {

const char* opcode_name(std::uint8_t opcode) {
  const OpcodeInfo& info = opcode_info(opcode);
  return info.known() ? info.name : "UNKNOWN";
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kRc: return "RC";
    case Transport::kUc: return "UC";
    case Transport::kRd: return "RD";
    case Transport::kUd: return "UD";
    case Transport::kCnp: return "CNP";
    case Transport::kXrc: return "XRC";
    case Transport::kSr: return "SR";
    case Transport::kOther: break;
  }
  return "OTHER";
}

const char* nak_code_name(std::uint8_t code) {
  switch (static_cast<NakCode>(code)) {
    case NakCode::kPsnSequenceError: return "PSN_SEQUENCE_ERROR";
    case NakCode::kInvalidRequest: return "INVALID_REQUEST";
    case NakCode::kRemoteAccessError: return "REMOTE_ACCESS_ERROR";
    case NakCode::kRemoteOperationalError: return "REMOTE_OPERATIONAL_ERROR";
    case NakCode::kInvalidRdRequest: return "INVALID_RD_REQUEST";
  }
  return "RESERVED";
}

}  // namespace uroce::wire
