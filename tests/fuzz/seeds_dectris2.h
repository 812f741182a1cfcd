/* Seeds of fuzz_dectris_cbor (tests/fuzz/seeds_dectris2.c). */
#ifndef QEM_FUZZ_SEEDS_DECTRIS2_H
#define QEM_FUZZ_SEEDS_DECTRIS2_H

/* Writes OUT/dectris_cbor/: stream V2 series as tests/live/sim_dectris2.py
 * sends them, in the layout fuzz_dectris_cbor reads (each message a u32 LE
 * length and its CBOR): small uint8/uint16/uint32 series raw, lz4 (HDF5
 * framing) and bslz4 (a partial block among them), with and without a
 * pixel mask (raw and compressed), and a start that leaves the shape to the
 * first image. */
void seeds_dectris2(const char *out);

#endif
