#!/bin/sh
# A stand-in for an anchor of `loom bench` that misbehaves on request, for bench_format.sh. It speaks
# the driver's protocol ("NAME THREADS QUICK" lines in, "NAME VALUE" lines out):
#   alloc_free_pair_4k    answers 100
#   glibc_malloc_free_4k  FAKE_ANCHOR_MODE=values (default): answers nan, as an anchor without the
#                         measurement does; hang: never answers (a child sleeps; both ignore SIGTERM,
#                         their pids are appended to $FAKE_ANCHOR_PIDS); die: says why on stderr and
#                         exits with status 7
#   anything else         answers nan
[ "$1" = serve ] || { echo "usage: fake_anchor.sh serve SUITE" >&2; exit 2; }
echo "fake anchor: serving $2" >&2
while read -r name threads quick; do
  case "$name" in
    alloc_free_pair_4k) echo "$name 100" ;;
    glibc_malloc_free_4k)
      case "${FAKE_ANCHOR_MODE:-values}" in
        hang)
          trap '' TERM
          sleep 1000 &
          echo "$! $$" >> "$FAKE_ANCHOR_PIDS"
          wait ;;
        die)
          echo "fake anchor: giving up on $name" >&2
          exit 7 ;;
        *) echo "$name nan" ;;
      esac ;;
    *) echo "$name nan" ;;
  esac
done
