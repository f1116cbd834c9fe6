#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps processes that reach one data file through different lock files apart.
///
/// LMDB names the lock file after the path it is given (`path-lock`), so two names for one data file — a hard link,
/// a bind mount, another mount of the same disk — give two lock files, and processes using different ones do not
/// exclude each other: their writes interleave and acknowledged commits are lost. Symbolic links are resolved
/// before LMDB sees the path (``StoreFile/canonicalPath(_:)``); this guard catches the rest.
///
/// Each process holding the store open takes a shared open-file-description lock on one byte of the data file, far
/// past its end, at an offset that stands for the lock file it uses (its device and inode). Processes using the same
/// lock file share that byte; a process that finds a lock on any other byte of the region is using another lock
/// file than a process that has the store open now, and refuses to go on. Both processes take their lock before
/// looking, so of two that start together at least one sees the other. The lock goes away with the descriptor:
/// when the environment closes or the process dies.
///
/// Open-file-description locks are Linux's (`F_OFD_SETLK`); elsewhere the guard does nothing.
final class LockFileGuard {
    private let descriptor: Int32
    /// The byte of the region that stands for this process's lock file.
    private let mark: Int64

    /// The region of the data file's byte range whose bytes stand for lock files; nothing is ever written there.
    private static let regionStart: Int64 = 1 << 62
    private static let regionLength: Int64 = 1 << 40

    #if os(Linux)
    // Linux's values on every architecture (<asm-generic/fcntl.h>); Glibc's module does not export them.
    private static let getLock: Int32 = 36
    static let setLock: Int32 = 37
    #endif

    /// Takes this process's mark for `lockPath` on the data file and checks that no process has the data file open
    /// through another lock file.
    ///
    /// - Throws: ``LMDBError/busy`` naming the store when another process uses another lock file for it.
    init?(dataPath: String, lockPath: String, reportedPath: String) throws(LMDBError) {
        #if os(Linux)
        guard let lockFile = StoreFile.identity(of: lockPath) else { return nil }
        // Open for writing where the file allows it: holding the mark alone (``useExclusively(_:)``) needs a write lock.
        var descriptor = open(dataPath, O_RDWR | O_CLOEXEC)
        if descriptor < 0 { descriptor = open(dataPath, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else { return nil }
        let mark = Self.regionStart + Int64(bitPattern: Self.hash(lockFile) % UInt64(Self.regionLength))
        var shared = Self.range(F_RDLCK, from: mark, to: mark + 1)
        guard fcntl(descriptor, Self.setLock, &shared) == 0 else {
            let failure = errno
            close(descriptor)
            if failure == EAGAIN || failure == EACCES {
                // Another process holds the mark alone (``useExclusively(_:)``).
                throw LMDBError(.busy, path: reportedPath,
                                message: "another process is using this store alone (migrating it to another model version); open it once that is done")
            }
            // The file system keeps no such locks (some network file systems): nothing to compare with.
            return nil
        }
        for (start, end) in [(Self.regionStart, mark), (mark + 1, Self.regionStart + Self.regionLength)] where start < end {
            var probe = Self.range(F_WRLCK, from: start, to: end)
            if fcntl(descriptor, Self.getLock, &probe) == 0 && probe.l_type != Int16(F_UNLCK) {
                close(descriptor)
                throw LMDBError(.busy, path: reportedPath,
                                message: "another process has this store open through another name (a hard link or another mount of the file) and so uses another lock file than \(lockPath); LMDB's processes would not exclude each other and saves would be lost — open the store by one name in every process (symbolic links are fine)")
            }
        }
        self.descriptor = descriptor
        self.mark = mark
        #else
        return nil
        #endif
    }

    /// Runs `body` holding this process's mark alone: no other process has the store open through any name while
    /// it runs, and none can open it (their ``init(dataPath:lockPath:reportedPath:)`` fails with ``LMDBError/busy``).
    ///
    /// - Throws: ``LMDBError/busy`` naming the store when another process (or another open of the file in this one)
    ///   has it open; `body`'s error.
    func useExclusively<Result>(reportedPath: String, _ body: () throws -> Result) throws -> Result {
        #if os(Linux)
        var exclusive = Self.range(F_WRLCK, from: mark, to: mark + 1)
        guard fcntl(descriptor, Self.setLock, &exclusive) == 0 else {
            // A file this process may only read cannot be held alone (nor written, so nothing is migrated in it).
            if errno == EBADF { return try body() }
            throw LMDBError(.busy, path: reportedPath, message: "another process has this store open; it must be closed for the store to be used alone (to migrate it)")
        }
        defer {
            var shared = Self.range(F_RDLCK, from: mark, to: mark + 1)
            _ = fcntl(descriptor, Self.setLock, &shared)
        }
        #endif
        return try body()
    }

    deinit {
        close(descriptor)
    }

    /// A lock request of `type` on the bytes `start..<end` of a file.
    static func range(_ type: Int32, from start: Int64, to end: Int64) -> flock {
        var range = flock()
        range.l_type = Int16(type)
        range.l_whence = Int16(SEEK_SET)
        range.l_start = off_t(start)
        range.l_len = off_t(end - start)
        return range
    }

    /// FNV-1a over the device and inode: the same in every process (Swift's `Hasher` is seeded per process).
    private static func hash(_ identity: StoreFile.Identity) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for word in [identity.device, identity.inode] {
            for shift in stride(from: 0, to: 64, by: 8) {
                hash = (hash ^ (word >> UInt64(shift) & 0xFF)) &* 0x0000_0100_0000_01B3
            }
        }
        return hash
    }
}
