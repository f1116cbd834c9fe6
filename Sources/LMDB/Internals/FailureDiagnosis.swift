#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns the bare `errno` LMDB hands back for an open or a commit into an error that names the real cause: which
/// file is not writable, that the map does not fit the address space, that the disk is full.
enum FailureDiagnosis {
    /// Why `mdb_env_open` failed with `code`.
    static func openFailure(_ code: Int32, path: String, dataPath: String, lockPath: String, options: Environment.Options) -> LMDBError {
        let verb = options.isReadOnly ? "cannot open the store read-only" : "cannot open the store"
        switch code {
        case ENOMEM:
            return LMDBError(LMDBError(rawValue: code), path: path,
                message: "\(verb): its memory map of \(options.mapSize) bytes does not fit in this process's address space (see ulimit -v); pass a smaller mapSize — the map grows by itself as the store does")
        case EACCES, EPERM, EROFS:
            return LMDBError(LMDBError(rawValue: code), path: path, message: "\(verb): " + accessProblem(dataPath: dataPath, lockPath: lockPath, readOnly: options.isReadOnly))
        default:
            return LMDBError(LMDBError(rawValue: code), path: path, message: verb)
        }
    }

    /// Which of the files an open needs this process cannot use: the data file, the lock file, or the folder the
    /// lock file must be made in. LMDB writes the lock file even to read.
    private static func accessProblem(dataPath: String, lockPath: String, readOnly: Bool) -> String {
        let folder = lockPath.lastIndex(of: "/").map { String(lockPath[..<$0]) } ?? "."
        if access(dataPath, readOnly ? R_OK : R_OK | W_OK) != 0 && access(dataPath, F_OK) == 0 {
            return "this process may not \(readOnly ? "read" : "read and write") the data file \(dataPath)"
        }
        if access(lockPath, F_OK) == 0 {
            if access(lockPath, R_OK | W_OK) != 0 {
                return "this process may not write the lock file \(lockPath), which LMDB updates even to read (give it write permission, or remove it when no process has the store open)"
            }
        } else if access(folder.isEmpty ? "/" : folder, W_OK | X_OK) != 0 {
            return "the folder \(folder) is not writable, so LMDB cannot create the lock file \(lockPath) it needs even to read"
        }
        var info = statvfs()
        if statvfs(folder.isEmpty ? "/" : folder, &info) == 0 && info.f_flag & UInt(ST_RDONLY) != 0 {
            return "the file system holding \(folder) is mounted read-only, and LMDB must write the lock file \(lockPath) even to read"
        }
        return "the operating system refused access to the data file \(dataPath) or the lock file \(lockPath)"
    }

    /// Why a commit failed with `code` (`EIO` is what LMDB reports for a short write, which a full disk gives).
    static func commitFailure(_ code: Int32, path: String, dataPath: String) -> LMDBError {
        guard code == EIO || code == ENOSPC || code == EFBIG else {
            return LMDBError(LMDBError(rawValue: code), path: path, message: "the commit failed; nothing was written")
        }
        let folder = dataPath.lastIndex(of: "/").map { String(dataPath[..<$0]) } ?? "."
        var info = statvfs()
        let free = statvfs(folder.isEmpty ? "/" : folder, &info) == 0 ? Int(info.f_bavail) * Int(info.f_frsize) : nil
        if code == ENOSPC || (free ?? .max) < 1 << 20 {
            return LMDBError(.noSpace, path: path,
                message: "the disk holding \(folder) is full (\(free.map { "\($0) bytes" } ?? "no space") left): the commit wrote nothing; free some space and save again")
        }
        var limit = rlimit()
        #if os(Linux)
        let (fileSizeLimit, unlimited) = (__rlimit_resource_t(RLIMIT_FSIZE.rawValue), rlim_t.max)  // RLIM_INFINITY is ~0
        #else
        let (fileSizeLimit, unlimited) = (RLIMIT_FSIZE, RLIM_INFINITY)
        #endif
        if getrlimit(fileSizeLimit, &limit) == 0 && limit.rlim_cur != unlimited {
            return LMDBError(LMDBError(rawValue: code), path: path,
                message: "the commit could not write the store file: it would pass this process's file size limit of \(limit.rlim_cur) bytes (see ulimit -f); nothing was written")
        }
        return LMDBError(LMDBError(rawValue: code), path: path,
            message: "the commit could not write the store file (an I/O error; \(free.map { "\($0) bytes are free on its disk" } ?? "its disk's free space is unknown")); nothing was written")
    }
}
