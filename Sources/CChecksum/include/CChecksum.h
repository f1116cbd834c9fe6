#ifndef LMDBSTORE_CCHECKSUM_H
#define LMDBSTORE_CCHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// Whether this CPU has a CRC-32C instruction that `lmdbstore_crc32c_update` uses (SSE 4.2 on x86-64, the CRC
/// extension on 64-bit ARM). Without one the caller computes the checksum in software.
int lmdbstore_crc32c_hardware_available(void);

/// `lmdbstore_crc32c_hardware_available()`, asked once when the library is loaded.
extern int lmdbstore_crc32c_has_hardware;

/// Whether `lmdbstore_crc32c_update` may be used: a plain load, cheap enough to ask once per row read.
static inline int lmdbstore_crc32c_uses_hardware(void) {
    return lmdbstore_crc32c_has_hardware;
}

/// Folds `count` bytes at `bytes` into the CRC-32C register `crc` (no pre- or post-inversion) with the CPU's
/// instruction; only when `lmdbstore_crc32c_hardware_available()` said so.
uint32_t lmdbstore_crc32c_update(uint32_t crc, const void *bytes, size_t count);

#endif
