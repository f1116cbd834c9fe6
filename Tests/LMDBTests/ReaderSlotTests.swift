import Foundation
import LMDB
import Testing

/// Reader slots are shared by every process using a store: no process may keep more than it needs.
@Suite struct ReaderSlotTests {
    let directory = TemporaryDirectory()

    /// Starts the helper holding `threads` reads open at once, waits for its "ready <slots>" line and returns the
    /// process, the slots it still held, and its output pipe.
    private func readConcurrently(_ path: String, threads: Int, idle: Double) throws -> (Process, Int, FileHandle) {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["read-concurrently", path, String(threads), String(idle)]
        let pipe = Pipe()
        child.standardOutput = pipe
        child.standardError = pipe
        try child.run()
        let line = readLine(pipe.fileHandleForReading)
        guard line.hasPrefix("ready "), let slots = Int(line.dropFirst(6)) else {
            throw HelperFailed(said: line)
        }
        return (child, slots, pipe.fileHandleForReading)
    }

    private func readLine(_ handle: FileHandle) -> String {
        var bytes: [UInt8] = []
        while let byte = try? handle.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") { bytes.append(byte) }
        return String(decoding: bytes, as: UTF8.self)
    }

    struct HelperFailed: Error { let said: String }

    @Test func idleProcessesThatOnceReadALotLeaveSlotsForAFifth() throws {
        let path = directory.file("store.lmdb")
        // The first process sets the reader table: LMDB's old default of 126 slots, fewer than 4 × 32.
        let environment = try Environment.open(at: path, options: .init { $0.maxReaders = 126 })
        let db = try environment.openDatabase(named: "shared")
        try environment.write { try db.put([1], forKey: [UInt8](utf8: "k"), in: $0) }

        var helpers: [(Process, FileHandle)] = []
        for _ in 0..<4 {
            let (child, kept, output) = try readConcurrently(path, threads: 32, idle: 3)
            #expect(kept <= 8, "a process keeps at most 8 finished read transactions, not the 32 it ran")
            helpers.append((child, output))
        }
        // A fifth process (this one) reads while the four sit idle with their pools.
        #expect(try environment.read { try db.value(forKey: [UInt8](utf8: "k"), in: $0) } == [1])
        let sixth = try readConcurrently(path, threads: 16, idle: 0)
        #expect(sixth.1 <= 8)
        sixth.0.waitUntilExit()

        for (child, output) in helpers {
            #expect(readLine(output) == "idle 0", "an idle process gives its kept slots back")
            child.waitUntilExit()
            #expect(child.terminationStatus == 0)
        }
    }

    @Test func aFullReaderTableSaysWhichLimitWasHit() throws {
        let environment = try directory.openStore { $0.maxReaders = 4 }
        let db = try environment.openDatabase(named: "shared")
        try environment.write { try db.put([1], forKey: [UInt8](utf8: "k"), in: $0) }

        let holding = DispatchGroup()
        let release = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<4 {
            holding.enter()
            done.enter()
            Thread.detachNewThread {
                _ = try? environment.read { _ in
                    holding.leave()
                    release.wait()
                }
                done.leave()
            }
        }
        holding.wait()
        do {
            _ = try environment.read { _ in 0 }
            Issue.record("a fifth read found a slot in a table of four")
        } catch let error as LMDBError {
            #expect(error == .readersFull)
            #expect(error.description.contains("4 reader slots"), "\(error)")
            #expect(error.description.contains("this process has 4 read transactions open"), "\(error)")
        }
        for _ in 0..<4 { release.signal() }
        done.wait()
        #expect(try environment.read { try db.value(forKey: [UInt8](utf8: "k"), in: $0) } == [1], "slots come back when reads end")
        #expect(environment.readerSlots().count <= 4)
        #expect(environment.readerSlots().allSatisfy { $0.processID == getpid() && $0.transactionID == nil },
                "only this process's kept, reset transactions hold slots now")
    }
}
