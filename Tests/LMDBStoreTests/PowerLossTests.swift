import Foundation
import TestSupport
import Testing
@testable import lmdbstore_test_helper

/// What a power cut can leave of a file, built from the log of the power-loss recorder (`Tests/PowerLoss/powerloss.c`,
/// preloaded into the writers): everything written before the last flush of the file that returned, every write
/// through a descriptor opened with `O_DSYNC` that returned, and of each other write after that flush any part —
/// kept whole, lost, or torn, some of its 512-byte sectors on the disk and some not. (SQLite's crash VFS is the
/// model.) The cut may come at any record of the log, and the writers' acknowledgements logged before it are those
/// the store must keep.
struct PowerCut {
    /// One record of the log.
    enum Record: Equatable {
        /// Bytes written at an offset; `durable` when they were written through an `O_DSYNC` descriptor.
        case write(offset: Int, bytes: [UInt8], durable: Bool)
        /// A flush of the file (`fsync`, `fdatasync`) returned.
        case flush
        /// A process wrote to its file of marks (its acknowledgements).
        case mark(process: Int32, bytes: [UInt8])
    }

    /// The sector a torn write keeps or loses as a whole.
    static let sectorSize = 512

    /// The records of `log`, in order; a last record the writer was killed in the middle of appending is left out.
    static func records(_ log: [UInt8]) throws -> [Record] {
        var records: [Record] = []
        var at = 0
        func number(_ start: Int) -> Int {
            (0..<8).reduce(0) { $0 | Int(log[start + $1]) << (8 * $1) }
        }
        while at + 24 <= log.count {
            let kind = log[at], offset = number(at + 8), length = number(at + 16)
            let process = Int32(truncatingIfNeeded: number(at) >> 32)
            guard at + 24 + length <= log.count else { break }
            let bytes = Array(log[(at + 24)..<(at + 24 + length)])
            switch kind {
            case UInt8(ascii: "W"): records.append(.write(offset: offset, bytes: bytes, durable: false))
            case UInt8(ascii: "D"): records.append(.write(offset: offset, bytes: bytes, durable: true))
            case UInt8(ascii: "S"): records.append(.flush)
            case UInt8(ascii: "M"): records.append(.mark(process: process, bytes: bytes))
            default: throw CrashCheckFailure(description: "the power-loss log has a record of kind \(kind) at byte \(at)")
            }
            at += 24 + length
        }
        return records
    }

    /// How the writes after the last flush fared.
    struct Outcome: Equatable {
        var kept = 0, lost = 0, torn = 0
    }

    /// The last number each process acknowledged in `records`: its marks are lines, each a number and a newline.
    static func acknowledged(_ records: some Collection<Record>) -> [Int32: Int] {
        var marks: [Int32: [UInt8]] = [:]
        for case .mark(let process, let bytes) in records { marks[process, default: []] += bytes }
        return marks.compactMapValues { bytes in
            String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast().last.flatMap { Int($0) }
        }
    }

    /// The file a power cut after `records` could leave, starting from `base` (the file before the first record).
    static func image(base: [UInt8], records: [Record], random: inout SplitMix64) -> (image: [UInt8], outcome: Outcome) {
        var image = base
        var outcome = Outcome()
        let lastFlush = records.lastIndex(of: .flush) ?? -1
        func put(_ bytes: ArraySlice<UInt8>, at offset: Int) {
            if image.count < offset + bytes.count { image += repeatElement(0, count: offset + bytes.count - image.count) }
            image.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        }
        for (index, record) in records.enumerated() {
            guard case .write(let offset, let bytes, let durable) = record else { continue }
            if index < lastFlush || durable {
                put(bytes[...], at: offset)
                continue
            }
            switch random.next() % 3 {
            case 0:
                put(bytes[...], at: offset)
                outcome.kept += 1
            case 1:
                outcome.lost += 1
            default:
                // Sectors are aligned to the file, not to the write.
                var start = offset
                while start < offset + bytes.count {
                    let end = min(offset + bytes.count, (start / sectorSize + 1) * sectorSize)
                    if random.next() % 2 == 0 { put(bytes[(start - offset)..<(end - offset)], at: start) }
                    start = end
                }
                outcome.torn += 1
            }
        }
        return (image, outcome)
    }
}

/// The power-loss recorder compiled for this machine, once per test process.
enum PowerLossRecorder {
    /// The path of the compiled library, or why there is none.
    static let library: Result<String, CrashCheckFailure> = compile()

    /// The environment that makes a process preload the recorder, watching `file` and appending to `log`.
    static func environment(watching file: String, log: String) throws -> [String: String] {
        ["LD_PRELOAD": try library.get(), "LMDBSTORE_POWER_LOSS_FILE": file, "LMDBSTORE_POWER_LOSS_LOG": log]
    }

    /// Whether this test process runs under a sanitizer (`make sanitize`): a sanitizer's runtime must come first
    /// among a process's libraries, so a preloaded one cannot go in front of it.
    static var isUnavailable: Bool { ProcessInfo.processInfo.environment["LMDBSTORE_SANITIZER"] != nil }

    private static func compile() -> Result<String, CrashCheckFailure> {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("PowerLoss/powerloss.c").path
        let searchPath = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        // The toolchain's own clang first: it is there wherever the tests could be built.
        let compilers = ["clang", "cc", "gcc"].flatMap { name in searchPath.map { "\($0)/\(name)" } }
        guard let compiler = compilers.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            return .failure(CrashCheckFailure(description: "no C compiler (clang, cc or gcc) on PATH to build \(source)"))
        }
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-powerloss-\(getpid()).so").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: compiler)
        process.arguments = ["-shared", "-fPIC", "-O2", "-o", output, source, "-ldl"]
        let errors = Pipe()
        process.standardError = errors
        do {
            try process.run()
        } catch {
            return .failure(CrashCheckFailure(description: "cannot run \(compiler): \(error)"))
        }
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            return .failure(CrashCheckFailure(description: "\(compiler) could not build \(source):\n\(message)"))
        }
        atexit { unlink(FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-powerloss-\(getpid()).so").path) }
        return .success(output)
    }
}

/// Power cuts, not only process deaths (issue 23): a killed process leaves the operating system's page cache
/// whole, so the crash test cannot show what `durability: full` promises. Here each writer runs with the power-loss
/// recorder, and after the kill the store file is replaced by one a power cut up to that moment could have left.
///
/// `LMDBSTORE_POWER_CUTS` sets the number of cuts (default 100; a full run is 1 000 or more), `LMDBSTORE_POWER_SEED`
/// the seed of the writers' timing and of the cuts.
@Suite(.serialized, .disabled(if: PowerLossRecorder.isUnavailable, "a preloaded library cannot run under a sanitizer"))
struct PowerLossTests {
    @Test func theRecorderLogsEveryWriteAndFlushOfTheWatchedFileAndNothingElse() throws {
        let folder = StoreFolder()
        let path = folder.file("plain.lmdb").path, other = folder.file("other.lmdb").path, log = folder.file("log").path
        #expect(try runHelper(["write", path, "before", "1"]).status == 0)
        #expect(try runHelper(["write", other, "before", "1"]).status == 0)
        let base = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let otherBefore = try Data(contentsOf: URL(fileURLWithPath: other))

        let helper = Process()
        helper.executableURL = URL(fileURLWithPath: helperPath())
        helper.arguments = ["write", path, "during", "5"]
        helper.environment = ProcessInfo.processInfo.environment.merging(try PowerLossRecorder.environment(watching: path, log: log)) { $1 }
        helper.standardOutput = FileHandle.nullDevice
        try helper.run()
        helper.waitUntilExit()
        #expect(helper.terminationStatus == 0)
        // Another process with the recorder, writing another file: nothing of it is logged.
        let bystander = Process()
        bystander.executableURL = URL(fileURLWithPath: helperPath())
        bystander.arguments = ["write", other, "during", "3"]
        bystander.environment = helper.environment
        bystander.standardOutput = FileHandle.nullDevice
        try bystander.run()
        bystander.waitUntilExit()
        #expect(bystander.terminationStatus == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: other)) != otherBefore)

        let records = try PowerCut.records([UInt8](try Data(contentsOf: URL(fileURLWithPath: log))))
        // Five commits, each: data pages, a flush, then the meta page through LMDB's O_DSYNC descriptor.
        #expect(records.filter { $0 == .flush }.count == 5)
        let metaWrites = records.filter { if case .write(let offset, _, true) = $0 { offset < 2 * 4096 } else { false } }
        #expect(metaWrites.count == 5)
        guard case .write(_, _, true)? = records.last else {
            Issue.record("the last record is not the meta page's durable write: \(records.last.map(String.init(describing:)) ?? "none")")
            return
        }
        // Everything logged, replayed over the file as it was, gives the file as it is: no write went unseen.
        var random = SplitMix64(seed: 1)
        let replayed = PowerCut.image(base: base, records: records.filter { $0 != .flush } + [.flush], random: &random)
        #expect(replayed.image == [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
    }

    @Test func aPowerCutKeepsWhatWasFlushedAndDurableWritesAndAnyPartOfTheRest() throws {
        func entry(_ kind: Character, _ offset: Int, _ bytes: [UInt8]) -> [UInt8] {
            [UInt8(kind.asciiValue!)] + [UInt8](repeating: 0, count: 7)
                + withUnsafeBytes(of: UInt64(offset).littleEndian, Array.init) + withUnsafeBytes(of: UInt64(bytes.count).littleEndian, Array.init) + bytes
        }
        let flushed = [UInt8](repeating: 1, count: 600), durable = [UInt8](repeating: 2, count: 100)
        let unflushed = [UInt8](repeating: 3, count: 1024), lastWrite = [UInt8](repeating: 4, count: 512)
        var log = entry("W", 0, flushed) + entry("S", 0, []) + entry("W", 1024, unflushed) + entry("D", 3000, durable)
            + entry("W", 4096, lastWrite)
        let whole = try PowerCut.records(log)
        log += entry("W", 8192, [5, 5, 5]).dropLast()
        #expect(try PowerCut.records(log) == whole, "a record cut short by the kill is left out")
        #expect(whole.count == 5)
        #expect(throws: CrashCheckFailure.self) { try PowerCut.records(entry("X", 0, [])) }

        var random = SplitMix64(seed: 7)
        var seen = PowerCut.Outcome()
        var tornHalves = Set<[UInt8]>()
        for _ in 0..<200 {
            let (image, outcome) = PowerCut.image(base: [UInt8](repeating: 9, count: 2048), records: whole, random: &random)
            seen.kept += outcome.kept
            seen.lost += outcome.lost
            seen.torn += outcome.torn
            #expect(outcome.kept + outcome.lost + outcome.torn == 2, "the two writes after the flush")
            #expect(image[0..<600].allSatisfy { $0 == 1 } && image[600..<1024].allSatisfy { $0 == 9 })
            #expect(image[3000..<3100].allSatisfy { $0 == 2 })
            // The unflushed write's two sectors, each there or not.
            let sectors = [image[1024..<1536], image[1536..<2048]].map { $0.allSatisfy { $0 == 3 } ? UInt8(3) : $0.allSatisfy { $0 == 9 } ? UInt8(9) : 0 }
            #expect(!sectors.contains(0), "a sector is written whole or not at all")
            tornHalves.insert(sectors)
            #expect(image.count == 3100 || image.count == 4608, "the file grows only by a write that reached it")
        }
        #expect(seen.kept > 0 && seen.lost > 0 && seen.torn > 0)
        #expect(tornHalves.count == 4, "each combination of the sectors is possible")
    }

    @Test func powerCutsLeaveExactlyTheAcknowledgedStatePlusAtMostOneOperation() throws {
        let cuts = ProcessInfo.processInfo.environment["LMDBSTORE_POWER_CUTS"].flatMap(Int.init) ?? 100
        let seed = ProcessInfo.processInfo.environment["LMDBSTORE_POWER_SEED"].flatMap(UInt64.init) ?? 41
        var rounds = CrashRounds(seed: seed)
        var random = SplitMix64(seed: seed + 1)
        var total = PowerCut.Outcome()
        try createStore(rounds)
        for round in 0..<cuts {
            let (outcome, cut) = try cutPower(&rounds, round: round, durability: "full", random: &random)
            total.kept += outcome.kept
            total.lost += outcome.lost
            total.torn += outcome.torn
            do {
                try rounds.check(round: round)
            } catch {
                // The round's log and the file before it stay for a look: the test folder goes when the test ends.
                let kept = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-power-loss-seed-\(seed)")
                try? FileManager.default.removeItem(at: kept)
                try? FileManager.default.copyItem(at: rounds.folder.url, to: kept)
                Issue.record("seed \(seed), power cut before record \(cut) of the log: \(error) (the log and base.lmdb are kept in \(kept.path))")
                return
            }
        }
        #expect(rounds.done["a"]! > 5 && rounds.done["b"]! > 5, "the writers got too few operations through: \(rounds.done)")
        #expect(total.lost > 0 && total.torn > 0, "the power cuts lost and tore unflushed writes: \(total)")
        print("power-loss test (seed \(seed)): \(cuts) cuts, operations done \(rounds.done), \(rounds.beyondAcknowledged) saved but not acknowledged; unflushed writes kept \(total.kept), lost \(total.lost), torn \(total.torn)")
    }

    /// The test above could not fail if the recorder missed what matters. A store that does not flush
    /// (`durability: noSync`) keeps no promise through a power cut; the same rounds must see it lose something.
    @Test func powerCutsOfAStoreThatDoesNotFlushAreSeenToLoseAcknowledgedSaves() throws {
        var rounds = CrashRounds(seed: 43)
        var random = SplitMix64(seed: 44)
        try createStore(rounds)
        var loss: (any Error)?
        for round in 0..<20 where loss == nil {
            _ = try cutPower(&rounds, round: round, durability: "noSync", random: &random)
            do {
                try rounds.check(round: round)
            } catch {
                loss = error
            }
        }
        #expect(loss != nil, "twenty power cuts of a store that never flushes lost nothing: the recorder missed writes")
        if let loss { print("power-loss test without flushing: \(loss)") }
    }

    /// Creates the store before the first round (a power cut while the file is first written is not this test's).
    private func createStore(_ rounds: CrashRounds) throws {
        _ = try rounds.folder.coordinator(CrashWorkload.model, "store.lmdb")
    }

    /// Runs a round's writers with the recorder, each stopping itself within its first 150 calls on the store file
    /// or its acknowledgements (some 25 saves), then cuts the power at a record of the log: at the last one one time
    /// in four, otherwise anywhere, so that most cuts fall within a save rather than between two. The store file
    /// becomes one the cut could have left (the lock file, in memory on a real machine, goes), and each writer's
    /// acknowledgements those it had made by then.
    private func cutPower(_ rounds: inout CrashRounds, round: Int, durability: String, random: inout SplitMix64) throws
        -> (outcome: PowerCut.Outcome, cut: Int)
    {
        let log = rounds.folder.file("power-loss.log").path
        unlink(log)
        let base = [UInt8](try Data(contentsOf: URL(fileURLWithPath: rounds.path)))
        try Data(base).write(to: rounds.folder.file("base.lmdb"))
        var environment = try PowerLossRecorder.environment(watching: rounds.path, log: log)
        environment["LMDBSTORE_POWER_LOSS_MARKS"] = rounds.acknowledgements("")
        let stops = Dictionary(uniqueKeysWithValues: rounds.writers.map { ($0, String(1 + random.next() % 150)) })
        let writers = try rounds.runWriters(round: round, durability: durability, stopThemselves: true) { writer in
            environment.merging(["LMDBSTORE_POWER_LOSS_STOP": stops[writer]!]) { $1 }
        }
        let records = try PowerCut.records([UInt8]((try? Data(contentsOf: URL(fileURLWithPath: log))) ?? Data()))
        let cut = random.next() % 4 == 0 ? records.count : Int(random.next() % UInt64(records.count + 1))
        let (image, outcome) = PowerCut.image(base: base, records: Array(records[..<cut]), random: &random)
        try Data(image).write(to: URL(fileURLWithPath: rounds.path))
        unlink(rounds.path + "-lock")
        let acknowledged = PowerCut.acknowledged(records[..<cut])
        for (process, writer) in writers {
            try rounds.keepAcknowledgements(of: writer, through: acknowledged[process] ?? rounds.done[writer]!)
        }
        return (outcome, cut)
    }
}
