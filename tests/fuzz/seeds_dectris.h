/* Seeds of fuzz_dectris_message (tests/fuzz/seeds_dectris.c). */
#ifndef QEM_FUZZ_SEEDS_DECTRIS_H
#define QEM_FUZZ_SEEDS_DECTRIS_H

/* Writes OUT/dectris_message/: series as tests/live/sim_dectris.py sends
 * them, in the layout fuzz_dectris_message reads: the Arina fixture's
 * config and first frames (bs32-lz4 and lz4), and small uint8/uint16
 * series with every header detail, appendix and encoding, partial
 * bitshuffle blocks among them. */
void seeds_dectris(const char *shared, const char *out);

#endif
