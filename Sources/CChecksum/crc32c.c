// CRC-32C (Castagnoli) with the CPU's instruction: the row checksum of every row the store reads. The same register
// update as the software table in CRC32C.swift, eight bytes per instruction.
//
// Each architecture gives its instruction for 8, 4, 2 and 1 bytes (`step64` … `step8`, under `CRC_TARGET`) and how to
// ask whether the CPU has it; the loop over the bytes is written once, below. The eight-byte step keeps the register
// in 64 bits, as x86-64's instruction does, so the word loops do not narrow it at every step.

#include "CChecksum.h"

#include <string.h>

#if defined(__x86_64__)

#define CRC_TARGET __attribute__((target("sse4.2")))
#define HAS_CRC_INSTRUCTION 1

int lmdbstore_crc32c_hardware_available(void) {
    return __builtin_cpu_supports("sse4.2");
}

static inline CRC_TARGET uint64_t step64(uint64_t crc, uint64_t word) { return __builtin_ia32_crc32di(crc, word); }
static inline CRC_TARGET uint32_t step32(uint32_t crc, uint32_t word) { return __builtin_ia32_crc32si(crc, word); }
static inline CRC_TARGET uint32_t step16(uint32_t crc, uint16_t half) { return __builtin_ia32_crc32hi(crc, half); }
static inline CRC_TARGET uint32_t step8(uint32_t crc, uint8_t byte) { return __builtin_ia32_crc32qi(crc, byte); }

#elif defined(__aarch64__)

#define CRC_TARGET __attribute__((target("crc")))
#define HAS_CRC_INSTRUCTION 1

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
int lmdbstore_crc32c_hardware_available(void) {
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
}
#elif defined(__APPLE__)
int lmdbstore_crc32c_hardware_available(void) {
    return 1;  // every 64-bit Apple CPU has the CRC extension
}
#else
int lmdbstore_crc32c_hardware_available(void) {
    return 0;
}
#endif

static inline CRC_TARGET uint64_t step64(uint64_t crc, uint64_t word) { return __builtin_arm_crc32cd((uint32_t)crc, word); }
static inline CRC_TARGET uint32_t step32(uint32_t crc, uint32_t word) { return __builtin_arm_crc32cw(crc, word); }
static inline CRC_TARGET uint32_t step16(uint32_t crc, uint16_t half) { return __builtin_arm_crc32ch(crc, half); }
static inline CRC_TARGET uint32_t step8(uint32_t crc, uint8_t byte) { return __builtin_arm_crc32cb(crc, byte); }

#else

int lmdbstore_crc32c_hardware_available(void) {
    return 0;
}

uint32_t lmdbstore_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;  // never called: no instruction on this CPU
}

#endif

#if defined(HAS_CRC_INSTRUCTION)

CRC_TARGET
uint32_t lmdbstore_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t wide = crc;
    // Four words a turn while they last: one loop test per 32 bytes.
    while (count >= 32) {
        uint64_t words[4];
        memcpy(words, p, 32);
        wide = step64(wide, words[0]);
        wide = step64(wide, words[1]);
        wide = step64(wide, words[2]);
        wide = step64(wide, words[3]);
        p += 32;
        count -= 32;
    }
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = step64(wide, word);
        p += 8;
        count -= 8;
    }
    // The last 0–7 bytes in at most three steps (four, two, one), not one step a byte: rows are short, so the tail
    // is a good part of each checksum.
    crc = (uint32_t)wide;
    if (count & 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        crc = step32(crc, word);
        p += 4;
    }
    if (count & 2) {
        uint16_t half;
        memcpy(&half, p, 2);
        crc = step16(crc, half);
        p += 2;
    }
    if (count & 1) {
        crc = step8(crc, *p);
    }
    return crc;
}

#endif

int lmdbstore_crc32c_has_hardware = 0;

/// Runs when the library is loaded, before any Swift code: the row checksum then tests a plain global, not a lazily
/// initialized Swift one (whose `swift_once` check costs a call per row). Were it not to run, rows would be checked
/// with the table, which gives the same checksum.
__attribute__((constructor)) static void lmdbstore_crc32c_detect(void) {
    lmdbstore_crc32c_has_hardware = lmdbstore_crc32c_hardware_available();
}
