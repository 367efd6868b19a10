// The distributed layer's LOOM_* settings (internal): one table, declared in settings.cpp,
// registered when libloom loads (see loom/config.h). Read them through these objects, never with
// getenv.
#pragma once

#include "loom/config.h"

namespace loom::dist::settings {

extern const config::RealSetting kTimeout;       // LOOM_DIST_TIMEOUT
extern const config::ChoiceSetting kAlgo;        // LOOM_ALGO
extern const config::IntSetting kChunkBytes;     // LOOM_DIST_CHUNK_BYTES
extern const config::IntSetting kSpinUs;         // LOOM_DIST_SPIN_US
extern const config::IntSetting kYieldUs;        // LOOM_DIST_YIELD_US
extern const config::ChoiceSetting kTransport;   // LOOM_TRANSPORT
extern const config::IntSetting kTcpChannels;    // LOOM_TCP_CHANNELS
extern const config::IntSetting kShmCmaMin;      // LOOM_SHM_CMA_MIN
extern const config::FlagSetting kShmNoCma;      // LOOM_SHM_NO_CMA
extern const config::FlagSetting kShmNoCoop;     // LOOM_SHM_NO_COOP
extern const config::StringSetting kSocketAddr;  // LOOM_SOCKET_ADDR
extern const config::StringSetting kHostId;      // LOOM_HOST_ID
extern const config::ChoiceSetting kDebug;       // LOOM_DIST_DEBUG
extern const config::PathSetting kFlightDir;     // LOOM_FLIGHT_DIR
extern const config::IntSetting kFlightEntries;  // LOOM_FLIGHT_ENTRIES
extern const config::StringSetting kStoreToken;  // LOOM_STORE_TOKEN
extern const config::StringSetting kRunId;       // LOOM_RUN_ID
extern const config::IntSetting kRestartCount;   // LOOM_RESTART_COUNT
extern const config::RealSetting kLaunchGrace;   // LOOM_LAUNCH_GRACE

}  // namespace loom::dist::settings
