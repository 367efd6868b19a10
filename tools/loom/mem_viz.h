// `loom mem viz`: a caching-allocator Snapshot as one self-contained HTML page (inline CSS, JS and
// SVG; nothing fetched from the network): a timeline of allocated and reserved bytes over the
// history's events (or training steps, when the history has step markers), a map of the segments
// and their blocks at the end and, when the snapshot has it, at the peak, the operators holding the
// most live memory, and the statistics table.
#pragma once

#include <string>

#include "loom/memory/caching_allocator.h"

namespace loom::cli {

// `source` (the snapshot's file name) is shown in the page's title. Every string taken from the
// snapshot is escaped for the context it lands in (HTML text, attribute, or JSON in a script).
std::string memory_html(const memory::Snapshot& snapshot, const std::string& source);

// Bytes for people: "512 B", "1.50 KiB", "20.0 MiB", "3.25 GiB".
std::string format_bytes(double bytes);

}  // namespace loom::cli
