// A frame on its way out (TxFrame: a writable head, payload pieces sent in
// place, a trailer) and the head memory it is written into (TxHead). Both
// are part of the port interface an embedder implements, so they are
// defined in include/uroce/port.h; the wire layer builds them under its own
// names.
#pragma once

#include "uroce/port.h"

namespace uroce::wire {

using TxHead = uroce::TxHead;
using TxFrame = uroce::TxFrame;

}  // namespace uroce::wire
