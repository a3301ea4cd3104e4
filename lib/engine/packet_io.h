// What an engine runs on: a port that moves frames in bursts (PacketIo,
// RxFrame) and a clock. They are the port interface an embedder implements,
// defined in include/uroce/port.h; the engine uses them under its own names.
#pragma once

#include "uroce/port.h"
#include "wire/tx_frame.h"

namespace uroce::engine {

using RxFrame = uroce::RxFrame;
using PacketIo = uroce::PacketIo;
using Clock = uroce::Clock;

}  // namespace uroce::engine
