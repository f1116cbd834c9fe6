import Foundation
import LMDB

/// A fresh directory for one test's stores, removed when the test is done with it.
final class TemporaryDirectory {
    let path: String

    init() {
        let template = NSTemporaryDirectory() + "lmdbstore-tests-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let created = mkdtemp(&bytes) else { fatalError("mkdtemp failed: \(errno)") }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// A path inside the directory.
    func file(_ name: String) -> String {
        path + "/" + name
    }

    /// Opens (creating) a single-file store inside the directory.
    func openStore(_ name: String = "store.lmdb", _ configure: (inout Environment.Options) -> Void = { _ in }) throws -> Environment {
        try Environment.open(at: file(name), options: Environment.Options(configure))
    }
}

extension Array where Element == UInt8 {
    /// The UTF-8 bytes of a string, for readable keys in tests.
    init(utf8 string: String) {
        self = Array(string.utf8)
    }
}

/// Big-endian bytes of an integer: bytewise order equals numeric order for non-negative values.
func bigEndianKey(_ value: UInt16) -> [UInt8] {
    [UInt8(value >> 8), UInt8(value & 0xFF)]
}

/// Big-endian bytes of a 32-bit value: bytewise order equals numeric order.
func bigEndianBytes(_ value: UInt32) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
}

/// The path of the helper program the tests spawn as a second process.
func testHelperPath() throws -> String {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var directory = executable.deletingLastPathComponent()
    // On macOS the test binary sits inside an .xctest bundle.
    while directory.pathExtension == "xctest" || directory.lastPathComponent == "MacOS" || directory.lastPathComponent == "Contents" {
        directory.deleteLastPathComponent()
    }
    let candidate = directory.appendingPathComponent("lmdbstore-test-helper").path
    guard FileManager.default.isExecutableFile(atPath: candidate) else {
        throw HelperNotFound(path: candidate)
    }
    return candidate
}

struct HelperNotFound: Error, CustomStringConvertible {
    let path: String
    var description: String { "the test helper was not built at \(path); run `swift build` first" }
}
