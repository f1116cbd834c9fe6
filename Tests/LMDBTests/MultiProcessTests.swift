import Foundation
import LMDB
import Testing

@Suite struct MultiProcessTests {
    let directory = TemporaryDirectory()

    @Test func twoProcessesWritingAtOnceLoseNothing() throws {
        let path = directory.file("shared.lmdb")
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "shared")
        let count = 400

        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["write", path, "child", String(count)]
        let output = Pipe()
        child.standardOutput = output
        child.standardError = output
        try child.run()
        for n in 0..<count {
            try environment.write { try db.put(Array(String(n).utf8), forKey: Array("parent-\(n)".utf8), in: $0) }
        }
        child.waitUntilExit()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(child.terminationStatus == 0, "helper said: \(printed)")

        try environment.read { txn throws in
            #expect(try db.statistics(in: txn).entries == 2 * count)
            for n in 0..<count {
                #expect(try db.value(forKey: Array("parent-\(n)".utf8), in: txn) == Array(String(n).utf8))
                #expect(try db.value(forKey: Array("child-\(n)".utf8), in: txn) == Array(String(n).utf8))
            }
        }
    }

    @Test func anotherProcessGrowingTheMapIsAdopted() throws {
        let path = directory.file("growing.lmdb")
        let environment = try Environment.open(at: path, options: .init { $0.mapSize = 64 * 1024 })
        let db = try environment.openDatabase(named: "shared")
        try environment.write { try db.put([1], forKey: [UInt8](utf8: "mine"), in: $0) }

        // The child opens with the default 1 GiB map and writes far more than 64 KiB.
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["write", path, "bulk-padding-padding-padding-padding-padding-padding", "3000"]
        try child.run()
        child.waitUntilExit()
        #expect(child.terminationStatus == 0)

        try environment.read { txn throws in
            #expect(try db.statistics(in: txn).entries == 3001)
        }
        try environment.write { try db.put([2], forKey: [UInt8](utf8: "after"), in: $0) }
        try environment.read { txn throws in #expect(try db.value(forKey: [UInt8](utf8: "after"), in: txn) == [2]) }
    }
}
