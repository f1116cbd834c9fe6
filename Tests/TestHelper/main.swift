// A second OS process for the tests: writes to a store while the test process does, or gets killed mid-write.
//
//   lmdbstore-test-helper write <path> <prefix> <count>
//     Opens the single-file store at <path> and commits <count> write transactions, each putting
//     "<prefix>-<n>" → "<n>" into the database "shared". Prints "done <count>" and exits 0.
import LMDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func fail(_ message: String) -> Never {
    let bytes = Array("lmdbstore-test-helper: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(2)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: lmdbstore-test-helper write <path> <prefix> <count>") }

switch arguments[1] {
case "write":
    guard arguments.count == 5, let count = Int(arguments[4]) else { fail("usage: write <path> <prefix> <count>") }
    let path = arguments[2], prefix = arguments[3]
    do {
        let environment = try Environment.open(at: path)
        let database = try environment.openDatabase(named: "shared")
        for n in 0..<count {
            try environment.write { transaction in
                try database.put(Array(String(n).utf8), forKey: Array("\(prefix)-\(n)".utf8), in: transaction)
            }
        }
        print("done \(count)")
    } catch {
        fail("\(error)")
    }
default:
    fail("unknown command \(arguments[1])")
}
