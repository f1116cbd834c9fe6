#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What this process can learn about a store file before LMDB maps it.
///
/// LMDB 0.9 trusts the file: a file shorter than its meta page claims is mapped anyway and the first access past its
/// end is a `SIGBUS`, and a foreign file can be misread. Reading the two meta pages first turns both into errors.
///
/// Meta page layout (LMDB 0.9, `MDB_meta` after the 16-byte page header, native byte order):
/// magic `0xBEEFC0DE` (u32) at 16, format version (u32) at 20, page size (u32, `mm_dbs[0].md_pad`) at 40,
/// last used page number (u64) at 136, transaction id (u64) at 144. The second meta page starts at one page size.
struct StoreFile {
    /// Device and inode: one identity for every path (or link) that reaches the same file.
    struct Identity: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
    }

    static let magic: UInt32 = 0xBEEF_C0DE
    static let formatVersion: UInt32 = 1
    /// Where a meta page's fields end, and where its transaction id lies.
    static let metaFieldsEnd = 152
    static let transactionOffset = 144

    /// The identity of the file or directory at `path`, or `nil` when nothing is there.
    static func identity(of path: String) -> Identity? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Identity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// `path` with every symbolic link resolved, so that every process reaching a store through a link opens it by
    /// one name — LMDB names the lock file after the path it is given, and two lock files for one data file let two
    /// processes write at once. A missing file (a store about to be created) keeps its name in its folder's real
    /// path, after any dangling link to it is followed. Hard links cannot be resolved; ``LockFileGuard`` catches them.
    static func canonicalPath(_ path: String) -> String {
        if let resolved = realpath(path, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        var current = path
        for _ in 0..<40 {
            var info = stat()
            guard lstat(current, &info) == 0, (info.st_mode & S_IFMT) == S_IFLNK else { break }
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink(current, &target, target.count - 1)
            guard count > 0 else { break }
            let link = String(decoding: target[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            current = link.hasPrefix("/") ? link : folder(of: current) + "/" + link
        }
        let name = current.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? current
        guard !name.isEmpty, let folder = realpath(folder(of: current), nil) else { return current }
        defer { free(folder) }
        let base = String(cString: folder)
        return (base == "/" ? "" : base) + "/" + name
    }

    /// The folder part of `path` (`.` for a bare name).
    private static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The size of the regular file at `path`, or `nil` when there is none.
    static func size(of path: String) -> Int? {
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int(info.st_size)
    }

    /// Whether `path` is a directory.
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Throws when the non-empty data file at `dataPath` is not an LMDB file of a known version, or is shorter than
    /// its newest meta page says. An empty or missing file passes: LMDB initialises it.
    /// Whether two meta pages' transaction ids are a pair LMDB writes: consecutive, the even one on page 0, or both
    /// 0 before the first commit.
    static func transactionsAreConsecutive(_ pageZero: UInt64, _ pageOne: UInt64) -> Bool {
        if pageZero == 0, pageOne == 0 { return true }
        return pageZero % 2 == 0 && pageOne % 2 == 1 && (pageZero &+ 1 == pageOne || pageOne &+ 1 == pageZero)
    }

    static func validate(dataPath: String, reportedPath: String) throws(LMDBError) {
        guard let fileSize = size(of: dataPath), fileSize > 0 else { return }
        let descriptor = open(dataPath, O_RDONLY)
        guard descriptor >= 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: reportedPath, message: "cannot read the store file")
        }
        defer { close(descriptor) }

        func readMeta(at offset: Int) -> (pageSize: UInt32, lastPage: UInt64, transaction: UInt64)? {
            var buffer = [UInt8](repeating: 0, count: metaFieldsEnd)
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, metaFieldsEnd, off_t(offset)) }
            guard count == metaFieldsEnd else { return nil }
            func load<T: FixedWidthInteger>(_ type: T.Type, _ at: Int) -> T {
                buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: T.self) }
            }
            guard load(UInt32.self, 16) == magic else { return nil }
            return (load(UInt32.self, 40), load(UInt64.self, 136), load(UInt64.self, transactionOffset))
        }

        guard let first = readMeta(at: 0) else {
            throw LMDBError(.invalid, path: reportedPath, message: "the file is not an LMDB store (no LMDB meta page at its start)")
        }
        var versionBytes: UInt32 = 0
        _ = withUnsafeMutableBytes(of: &versionBytes) { pread(descriptor, $0.baseAddress, 4, 20) }
        guard versionBytes == formatVersion else {
            throw LMDBError(.versionMismatch, path: reportedPath,
                            message: "the file has LMDB format version \(versionBytes); this LMDB reads version \(formatVersion)")
        }
        let pageSize = Int(first.pageSize)
        guard pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else {
            throw LMDBError(.invalid, path: reportedPath, message: "the file's meta page names an impossible page size \(pageSize)")
        }
        var newest = first
        if let second = readMeta(at: pageSize) {
            // LMDB writes transaction n's meta page to page n % 2, so the two pages hold consecutive transaction ids,
            // the even one on page 0 (both 0 before the first commit). Anything else is damage that LMDB would
            // follow, rolling the file back or forward: a raised id in the older page makes it the newest.
            var metas = (first, second)
            var attempts = 0
            while !transactionsAreConsecutive(metas.0.transaction, metas.1.transaction) {
                // Another process may have committed twice between the two reads: read again, and refuse only a
                // pair that stays the same.
                attempts += 1
                guard let zero = readMeta(at: 0), let one = readMeta(at: pageSize) else { break }
                if (zero.transaction, one.transaction) == (metas.0.transaction, metas.1.transaction) || attempts == 20 {
                    throw LMDBError(.corrupted, path: reportedPath, message: """
                        the store file's meta pages are damaged: page 0 names transaction \(zero.transaction) and page 1 \
                        transaction \(one.transaction), a pair LMDB never writes (it writes consecutive ids, the even one on \
                        page 0); opened, the file would silently go back or forward to another state. Restore it from a copy
                        """)
                }
                metas = (zero, one)
                usleep(1000)
            }
            newest = metas.1.transaction > metas.0.transaction ? metas.1 : metas.0
        }
        let required = (Int(exactly: newest.lastPage) ?? Int.max / 2 - 1) &+ 1
        let (requiredBytes, overflow) = required.multipliedReportingOverflow(by: pageSize)
        guard overflow || fileSize < requiredBytes else { return }
        // A file may end before its last page when the pages past its end were taken and freed by one commit and
        // never written; it is cut short only when a table reaches one of them (a read there would be a SIGBUS).
        var metaPage = [UInt8](repeating: 0, count: metaFieldsEnd)
        let newestOffset = newest.transaction == first.transaction ? 0 : pageSize
        let walked = metaPage.withUnsafeMutableBytes { bytes -> PageWalk? in
            guard pread(descriptor, bytes.baseAddress, metaFieldsEnd, off_t(newestOffset)) == metaFieldsEnd,
                  let meta = PageWalk.Meta(UnsafeRawBufferPointer(bytes)) else { return nil }
            return PageWalk.check(meta, fileSize: fileSize, read: PageWalk.fileReader(descriptor, pageSize: pageSize)).walk
        }
        if overflow || walked.map({ $0.pageCount == 0 || $0.pagesPastEnd > 0 }) ?? true {
            throw LMDBError(.corrupted, path: reportedPath, message: """
                the store file is truncated: it is \(fileSize) bytes but its tables reach pages past its end (its meta \
                page counts \(overflow ? "more than Int.max" : String(requiredBytes)) bytes)
                """)
        }
    }
}
