// CRC-32C (Castagnoli) with the CPU's instruction: the row checksum of every row the store reads. The same register
// update as the software table in CRC32C.swift, eight bytes per instruction.

#include "CChecksum.h"

#include <string.h>

#if defined(__x86_64__)

int lmdbstore_crc32c_hardware_available(void) {
    return __builtin_cpu_supports("sse4.2");
}

__attribute__((target("sse4.2")))
uint32_t lmdbstore_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t wide = crc;
    // Four words a turn while they last: one loop test per 32 bytes.
    while (count >= 32) {
        uint64_t words[4];
        memcpy(words, p, 32);
        wide = __builtin_ia32_crc32di(wide, words[0]);
        wide = __builtin_ia32_crc32di(wide, words[1]);
        wide = __builtin_ia32_crc32di(wide, words[2]);
        wide = __builtin_ia32_crc32di(wide, words[3]);
        p += 32;
        count -= 32;
    }
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = __builtin_ia32_crc32di(wide, word);
        p += 8;
        count -= 8;
    }
    // The last 0–7 bytes in at most three steps (four, two, one), not one step a byte: rows are short, so the tail
    // is a good part of each checksum.
    uint32_t narrow = (uint32_t)wide;
    if (count & 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        narrow = __builtin_ia32_crc32si(narrow, word);
        p += 4;
    }
    if (count & 2) {
        uint16_t half;
        memcpy(&half, p, 2);
        narrow = __builtin_ia32_crc32hi(narrow, half);
        p += 2;
    }
    if (count & 1) {
        narrow = __builtin_ia32_crc32qi(narrow, *p);
    }
    return narrow;
}

#elif defined(__aarch64__)

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

__attribute__((target("crc")))
uint32_t lmdbstore_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = __builtin_arm_crc32cd(crc, word);
        p += 8;
        count -= 8;
    }
    if (count & 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        crc = __builtin_arm_crc32cw(crc, word);
        p += 4;
    }
    if (count & 2) {
        uint16_t half;
        memcpy(&half, p, 2);
        crc = __builtin_arm_crc32ch(crc, half);
        p += 2;
    }
    if (count & 1) {
        crc = __builtin_arm_crc32cb(crc, *p);
    }
    return crc;
}

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
