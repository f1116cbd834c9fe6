import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Durable, atomic file replacement: write a temporary file next to the target, flush it to the disk, rename it over
/// the target, flush the folder. A crash at any point leaves either the old file or the new one, never a mix.
enum AtomicFile {
    /// The temporary name a save writes before renaming it over `url`.
    static func temporaryURL(for url: URL) -> URL {
        url.deletingLastPathComponent().appendingPathComponent("." + url.lastPathComponent + ".saving")
    }

    /// Writes `bytes` to `url`'s temporary file and flushes it.
    static func writeTemporary(_ bytes: [UInt8], for url: URL) throws(StoreFileError) -> URL {
        let temporary = temporaryURL(for: url)
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw failure(url, "cannot create \(temporary.lastPathComponent)") }
        defer { close(descriptor) }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if result < 0 {
                if errno == EINTR { continue }
                let error = failure(url, "cannot write \(temporary.lastPathComponent)")
                unlink(temporary.path)
                throw error
            }
            written += result
        }
        guard fsync(descriptor) == 0 else {
            let error = failure(url, "cannot flush \(temporary.lastPathComponent) to the disk")
            unlink(temporary.path)
            throw error
        }
        return temporary
    }

    /// Renames a flushed temporary file over `url`.
    static func replace(_ url: URL, with temporary: URL) throws(StoreFileError) {
        guard rename(temporary.path, url.path) == 0 else { throw failure(url, "cannot rename \(temporary.lastPathComponent) over it") }
    }

    /// Flushes a folder, so renames in it survive a power loss.
    static func syncFolder(of url: URL) {
        let descriptor = open(url.deletingLastPathComponent().path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        close(descriptor)
    }

    /// Writes `bytes` to `url` atomically.
    static func save(_ bytes: [UInt8], to url: URL) throws {
        let temporary = try writeTemporary(bytes, for: url)
        try StoreFileTesting.checkpoint("beforeRename", at: url)
        try replace(url, with: temporary)
        syncFolder(of: url)
    }

    static func failure(_ url: URL, _ what: String) -> StoreFileError {
        StoreFileError(.io, url: url, reason: "\(what): \(String(cString: strerror(errno)))")
    }
}

/// Lets tests stop a save at a named point, as a crash would (nothing after it runs, nothing is cleaned up).
package enum StoreFileTesting {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var interruptions: [String: @Sendable (String) throws -> Void] = [:]

    /// Calls `body` with each checkpoint's name when a save of the store at `url` reaches it; a throw stops the
    /// save there. `nil` removes it.
    package static func setInterruption(at url: URL, _ body: (@Sendable (String) throws -> Void)?) {
        lock.withLock { interruptions[url.standardizedFileURL.path] = body }
    }

    static func checkpoint(_ name: String, at url: URL) throws {
        guard let body = lock.withLock({ interruptions[url.standardizedFileURL.path] }) else { return }
        try body(name)
    }
}
