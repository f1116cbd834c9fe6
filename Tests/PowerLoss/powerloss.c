// The power-loss recorder of the crash test (issue 23; SQLite's crash VFS is the model). The test compiles this file
// into a shared library and preloads it (LD_PRELOAD) into the writer processes it kills. It changes nothing a
// process sees: every call goes through. What it adds is a log of what reached one file, so that the test can build
// the file a power cut at any moment up to the kill could have left — what was flushed, plus any part of what was
// not — and what the writers had acknowledged by then:
//
//   'W' offset length bytes   a write to the file returned (pwrite, pwritev, write, writev)
//   'D' offset length bytes   the same, through a descriptor opened with O_DSYNC or O_SYNC: durable once returned
//   'S' 0 0                   fsync or fdatasync of the file returned: everything written before it is durable
//   'M' offset length bytes   a write to a file of marks (a writer's acknowledgements) returned
//
// Each record is a 24-byte header (kind, 3 bytes of zero, the writing process's ID as a little-endian 32-bit number,
// then offset and length as little-endian 64-bit numbers) followed by `length` bytes, appended to the log with one
// writev so that a killed process leaves at most its last record cut short, and records of several processes keep
// the order their calls returned in. A record is logged after the call it describes returns: a write or flush the
// process never saw complete is not one it can have relied on.
//
// LMDBSTORE_POWER_LOSS_FILE names the file to watch (matched by device and inode at each open, so a path written
// another way still counts), LMDBSTORE_POWER_LOSS_MARKS the start of the paths of the files of marks, and
// LMDBSTORE_POWER_LOSS_LOG the log to append to. Writes through a memory map (LMDB's MDB_WRITEMAP) are not seen; the
// stores under test do not use one.
//
// With LMDBSTORE_POWER_LOSS_STOP=N the process kills itself (SIGKILL) as it is about to make its (N+1)th call that
// would be logged. A process killed from outside could die between a call's return and its record, and the log
// would then miss a write that happened: a durable meta page written, say, that another process's next commit
// builds on. Stopped here, it dies between two calls, and the log holds exactly what it did.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { watchedLimit = 4096, notWatched = 0, watchedPlain = 1, watchedDurable = 2, watchedMarks = 3 };

// What each descriptor is to the watched file; written by open and close, read by the writes.
static unsigned char watched[watchedLimit];
static int logDescriptor = -1;
static long callsLeft = -1;  // before the process stops itself; -1: never

static int (*realOpen)(const char *, int, ...);
static int (*realOpenat)(int, const char *, int, ...);
static int (*realClose)(int);
static ssize_t (*realWrite)(int, const void *, size_t);
static ssize_t (*realPwrite)(int, const void *, size_t, off_t);
static ssize_t (*realWritev)(int, const struct iovec *, int);
static ssize_t (*realPwritev)(int, const struct iovec *, int, off_t);
static int (*realFsync)(int);
static int (*realFdatasync)(int);

// Finds the functions this file stands in front of; safe to call more than once (a library's constructor may open a
// file before this one's has run).
static void resolve(void) {
    if (realFdatasync != NULL) return;
    realOpen = dlsym(RTLD_NEXT, "open");
    realOpenat = dlsym(RTLD_NEXT, "openat");
    realClose = dlsym(RTLD_NEXT, "close");
    realWrite = dlsym(RTLD_NEXT, "write");
    realPwrite = dlsym(RTLD_NEXT, "pwrite");
    realWritev = dlsym(RTLD_NEXT, "writev");
    realPwritev = dlsym(RTLD_NEXT, "pwritev");
    realFsync = dlsym(RTLD_NEXT, "fsync");
    __atomic_store_n(&realFdatasync, (int (*)(int))dlsym(RTLD_NEXT, "fdatasync"), __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void start(void) {
    resolve();
    const char *stop = getenv("LMDBSTORE_POWER_LOSS_STOP");
    if (stop != NULL) callsLeft = atol(stop);
    const char *log = getenv("LMDBSTORE_POWER_LOSS_LOG");
    if (log != NULL) logDescriptor = realOpen(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static int kindOf(int descriptor) {
    resolve();
    if (descriptor < 0 || descriptor >= watchedLimit) return notWatched;
    return __atomic_load_n(&watched[descriptor], __ATOMIC_ACQUIRE);
}

// Called before each call on a watched descriptor: the process stops here once its calls are used up.
static void countCall(int descriptor) {
    if (kindOf(descriptor) == notWatched || __atomic_load_n(&callsLeft, __ATOMIC_ACQUIRE) < 0) return;
    if (__atomic_sub_fetch(&callsLeft, 1, __ATOMIC_ACQ_REL) < 0) kill(getpid(), SIGKILL);
}

// After a successful open: is this the watched file, and does a write through it return only once durable? Or is it
// a file of marks?
static void noteOpened(int descriptor, const char *path, int flags) {
    if (descriptor < 0 || descriptor >= watchedLimit || logDescriptor < 0) return;
    const char *marks = getenv("LMDBSTORE_POWER_LOSS_MARKS");
    if (marks != NULL && marks[0] != 0 && strncmp(path, marks, strlen(marks)) == 0) {
        __atomic_store_n(&watched[descriptor], (unsigned char)watchedMarks, __ATOMIC_RELEASE);
        return;
    }
    const char *target = getenv("LMDBSTORE_POWER_LOSS_FILE");
    struct stat opened, wanted;
    if (target == NULL || fstat(descriptor, &opened) != 0 || stat(target, &wanted) != 0) return;
    if (opened.st_dev != wanted.st_dev || opened.st_ino != wanted.st_ino) return;
    int kind = (flags & (O_DSYNC | O_SYNC)) != 0 ? watchedDurable : watchedPlain;
    __atomic_store_n(&watched[descriptor], (unsigned char)kind, __ATOMIC_RELEASE);
}

static void record(char kind, uint64_t offset, const struct iovec *parts, int count, size_t length) {
    unsigned char header[24] = {0};
    header[0] = (unsigned char)kind;
    uint32_t process = (uint32_t)getpid();
    for (int i = 0; i < 4; i++) header[4 + i] = (unsigned char)(process >> (8 * i));
    for (int i = 0; i < 8; i++) {
        header[8 + i] = (unsigned char)(offset >> (8 * i));
        header[16 + i] = (unsigned char)((uint64_t)length >> (8 * i));
    }
    // The header, then the written bytes up to `length` (a short write logs what it wrote).
    struct iovec pieces[1 + 1024];
    int used = 0;
    pieces[used++] = (struct iovec){header, sizeof header};
    size_t left = length;
    for (int i = 0; i < count && left > 0 && used < 1025; i++) {
        size_t take = parts[i].iov_len < left ? parts[i].iov_len : left;
        pieces[used++] = (struct iovec){parts[i].iov_base, take};
        left -= take;
    }
    int saved = errno;
    realWritev(logDescriptor, pieces, used);
    errno = saved;
}

static void recordWrite(int descriptor, uint64_t offset, const struct iovec *parts, int count, ssize_t written) {
    int kind = kindOf(descriptor);
    if (kind == notWatched || written <= 0) return;
    record(kind == watchedDurable ? 'D' : kind == watchedMarks ? 'M' : 'W', offset, parts, count, (size_t)written);
}

static void recordFlush(int descriptor, int result) {
    int kind = kindOf(descriptor);
    if ((kind == watchedPlain || kind == watchedDurable) && result == 0) record('S', 0, NULL, 0, 0);
}

static mode_t modeArgument(int flags, va_list arguments) {
    return (flags & O_CREAT) != 0 || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(arguments, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = modeArgument(flags, arguments);
    va_end(arguments);
    resolve();
    int descriptor = realOpen(path, flags, mode);
    noteOpened(descriptor, path, flags);
    return descriptor;
}

int open64(const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = modeArgument(flags, arguments);
    va_end(arguments);
    resolve();
    int descriptor = realOpen(path, flags, mode);
    noteOpened(descriptor, path, flags);
    return descriptor;
}

int openat(int directory, const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = modeArgument(flags, arguments);
    va_end(arguments);
    resolve();
    int descriptor = realOpenat(directory, path, flags, mode);
    noteOpened(descriptor, path, flags);
    return descriptor;
}

int openat64(int directory, const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = modeArgument(flags, arguments);
    va_end(arguments);
    resolve();
    int descriptor = realOpenat(directory, path, flags, mode);
    noteOpened(descriptor, path, flags);
    return descriptor;
}

int close(int descriptor) {
    resolve();
    if (descriptor >= 0 && descriptor < watchedLimit) __atomic_store_n(&watched[descriptor], notWatched, __ATOMIC_RELEASE);
    return realClose(descriptor);
}

ssize_t pwrite(int descriptor, const void *bytes, size_t count, off_t offset) {
    resolve();
    countCall(descriptor);
    ssize_t written = realPwrite(descriptor, bytes, count, offset);
    struct iovec part = {(void *)bytes, count};
    recordWrite(descriptor, (uint64_t)offset, &part, 1, written);
    return written;
}

ssize_t pwrite64(int descriptor, const void *bytes, size_t count, off_t offset) {
    return pwrite(descriptor, bytes, count, offset);
}

ssize_t pwritev(int descriptor, const struct iovec *parts, int count, off_t offset) {
    resolve();
    countCall(descriptor);
    ssize_t written = realPwritev(descriptor, parts, count, offset);
    recordWrite(descriptor, (uint64_t)offset, parts, count, written);
    return written;
}

ssize_t pwritev64(int descriptor, const struct iovec *parts, int count, off_t offset) {
    return pwritev(descriptor, parts, count, offset);
}

ssize_t write(int descriptor, const void *bytes, size_t count) {
    off_t offset = kindOf(descriptor) != notWatched ? lseek(descriptor, 0, SEEK_CUR) : 0;
    countCall(descriptor);
    ssize_t written = realWrite(descriptor, bytes, count);
    struct iovec part = {(void *)bytes, count};
    recordWrite(descriptor, (uint64_t)offset, &part, 1, written);
    return written;
}

ssize_t writev(int descriptor, const struct iovec *parts, int count) {
    off_t offset = kindOf(descriptor) != notWatched ? lseek(descriptor, 0, SEEK_CUR) : 0;
    countCall(descriptor);
    ssize_t written = realWritev(descriptor, parts, count);
    recordWrite(descriptor, (uint64_t)offset, parts, count, written);
    return written;
}

int fsync(int descriptor) {
    resolve();
    countCall(descriptor);
    int result = realFsync(descriptor);
    recordFlush(descriptor, result);
    return result;
}

int fdatasync(int descriptor) {
    resolve();
    countCall(descriptor);
    int result = realFdatasync(descriptor);
    recordFlush(descriptor, result);
    return result;
}
