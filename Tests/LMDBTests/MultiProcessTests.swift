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

    /// Runs the helper's `write` command and returns its exit status and what it printed.
    private func runWriter(_ path: String, _ prefix: String, _ count: Int) throws -> Process {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["write", path, prefix, String(count)]
        child.standardOutput = Pipe()
        child.standardError = child.standardOutput
        try child.run()
        return child
    }

    private func output(of child: Process) -> String {
        String(decoding: (child.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    /// Opening reads both meta pages and refuses a pair of transaction ids LMDB never writes; another process
    /// committing meanwhile must not make a sound file look damaged (a pair read mid-commit is read again).
    @Test func opensBesideAWriterCommittingNeverCallTheFileDamaged() throws {
        let path = directory.file("busy.lmdb")
        do {
            let environment = try Environment.open(at: path)
            let db = try environment.openDatabase(named: "shared")
            try environment.write { try db.put([0], forKey: [UInt8](utf8: "first"), in: $0) }
        }
        let child = try runWriter(path, "busy", 2000)
        var opens = 0
        while child.isRunning {
            _ = try Environment.open(at: path)
            opens += 1
        }
        child.waitUntilExit()
        #expect(child.terminationStatus == 0, "\(output(of: child))")
        #expect(opens > 10, "the opens overlapped the writer's commits: \(opens)")
    }

    @Test func processesWritingThroughASymbolicLinkShareOneLockFileAndLoseNothing() throws {
        let path = directory.file("store.lmdb")
        let link = directory.file("link.lmdb")
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "shared")
        #expect(symlink(path, link) == 0)
        let count = 300
        let children = try [runWriter(link, "viaLink", count), runWriter(path, "viaPath", count)]
        for n in 0..<count {
            try environment.write { try db.put(Array(String(n).utf8), forKey: Array("parent-\(n)".utf8), in: $0) }
        }
        for child in children {
            child.waitUntilExit()
            #expect(child.terminationStatus == 0, "helper said: \(output(of: child))")
        }
        try environment.read { txn throws in
            #expect(try db.statistics(in: txn).entries == 3 * count, "every acknowledged write is in the file")
            for prefix in ["parent", "viaLink", "viaPath"] {
                #expect(try db.value(forKey: Array("\(prefix)-\(count - 1)".utf8), in: txn) == Array(String(count - 1).utf8))
            }
        }
        #expect(access(directory.file("store.lmdb-lock"), F_OK) == 0)
        #expect(access(directory.file("link.lmdb-lock"), F_OK) != 0, "the link's name never gets a lock file of its own")
    }

    @Test func aSecondNameByHardLinkIsRefusedWhileTheStoreIsOpenAndWorksAlone() throws {
        let path = directory.file("store.lmdb")
        let hardLink = directory.file("other.lmdb")
        do {
            let environment = try Environment.open(at: path)
            let db = try environment.openDatabase(named: "shared")
            try environment.write { try db.put([1], forKey: [UInt8](utf8: "first"), in: $0) }
            #expect(link(path, hardLink) == 0)

            let refused = try runWriter(hardLink, "other", 10)
            refused.waitUntilExit()
            let said = output(of: refused)
            #expect(refused.terminationStatus != 0, "a process through the hard link must not write beside this one")
            #expect(said.contains("another name"), "\(said)")
            #expect(said.contains("EBUSY"), "\(said)")

            let sameName = try runWriter(path, "same", 10)
            sameName.waitUntilExit()
            #expect(sameName.terminationStatus == 0, "a second process by the same name is fine: \(output(of: sameName))")
            try environment.read { txn throws in
                #expect(try db.statistics(in: txn).entries == 11, "the refused process wrote nothing")
            }
        }
        // With no process holding the store, the other name works on its own.
        let alone = try runWriter(hardLink, "other", 10)
        alone.waitUntilExit()
        #expect(alone.terminationStatus == 0, "\(output(of: alone))")
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "shared")
        try environment.read { txn throws in #expect(try db.statistics(in: txn).entries == 21) }
    }
}
