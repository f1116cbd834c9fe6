import ArgumentParser
import Foundation
import LMDB

/// `lmdbstore-bench`: loads a generated dataset into LMDBStore and into SQLite (GRDB), runs the same workloads on
/// both (and on raw LMDB where they map), checks that both answer the same, and reports throughput and latency.
@main
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lmdbstore-bench",
        abstract: "Benchmark LMDBStore against SQLite (GRDB) and raw LMDB on a generated dataset.",
        subcommands: [Run.self, Generate.self, Packages.self],
        defaultSubcommand: Run.self)
}

struct CommonOptions: ParsableArguments {
    @Option(help: "Employees in the dataset, e.g. 10k, 100k, 1m, 10m. Several sizes may be given, comma-separated.")
    var objects: String = "1m"

    @Option(help: "The seed of the dataset generator.")
    var seed: UInt64 = 2026

    @Option(help: "Where generated datasets are kept and reused.")
    var data: String = ".bench-data"

    @Option(help: "Objects per save while loading.")
    var batch: Int = 10_000

    @Option(help: "Durability for both systems: full (fsync every commit) or relaxed (LMDB noSync, SQLite synchronous=OFF).")
    var durability: String = "relaxed"

    @Option(help: "LMDB read-ahead: on (the default), or off (MDB_NORDAHEAD: the kernel reads only the pages asked for, for random access to a store much larger than memory).")
    var readAhead: String = "on"

    /// The LMDB store's options for this run.
    var lmdbOptions: [String: String] {
        ["durability": durability == "full" ? "full" : "noSync", "readAhead": readAhead == "off" ? "false" : "true"]
    }

    @Flag(help: "Also run every smaller size from 10k up by factors of ten (--objects 1m --scale: 10k, 100k and 1m), so the report shows how each system scales.")
    var scale = false

    var sizes: [Int] {
        get throws {
            let given = try objects.split(separator: ",").map { text in
                guard let size = parseSize(String(text)), size > 0 else { throw ValidationError("--objects: \"\(text)\" is not a size like 10k or 1m") }
                return size
            }
            guard scale else { return given }
            var ladder = Set(given)
            for size in given {
                var step = 10_000
                while step < size { ladder.insert(step); step *= 10 }
            }
            return ladder.sorted()
        }
    }

    func validate() throws {
        _ = try sizes
        guard ["full", "relaxed"].contains(durability) else { throw ValidationError("--durability must be full or relaxed") }
        guard batch > 0 else { throw ValidationError("--batch must be positive") }
        guard ["on", "off"].contains(readAhead) else { throw ValidationError("--read-ahead must be on or off") }
    }
}

struct Generate: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Generate (or reuse) the datasets and print the load figures.")
    @OptionGroup var options: CommonOptions

    func run() throws {
        var loads: [Measurement] = []
        var notes: [String] = []
        for size in try options.sizes {
            let prepared = try Preparation.prepare(size: size, options: options)
            notes.append(prepared.summary)
            loads += prepared.loadMeasurements
        }
        // The load figures exist only for datasets generated now; reused ones have none to print.
        print(loads.isEmpty ? notes.joined(separator: "\n") : Table.render(loads, notes: notes, settings: options.settings))
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run every workload and print the comparison (the default).")
    @OptionGroup var options: CommonOptions

    @Option(help: "Seconds each workload may run on each system.")
    var seconds: Double = 2

    @Option(help: "Reader threads in the mixed workload.")
    var readers: Int = 3

    @Flag(help: "Print the results as JSON instead of tables.")
    var json = false

    @Option(help: "Write a Markdown report with an SVG chart to this folder.")
    var report: String?

    @Option(help: "Run only these workloads (comma-separated, matched against the step names: cold point faults, point faults, indexed equality, loaded fetch, range + sort + limit, count, unindexed filter, unindexed contains, relationship equality, top of a to-one, search within a to-one, to-many membership, key lookup of many, to-many traversal, group-by, update batch, delete batch, mixed, batch requests).")
    var only: String?

    func validate() throws {
        let known = Self.stepNames
        for name in selectedSteps ?? [] where !known.contains(name) {
            throw ValidationError("--only: no workload named \"\(name)\" (known: \(known.joined(separator: ", ")))")
        }
    }

    static let stepNames = ["cold point faults", "point faults", "indexed equality", "loaded fetch", "range + sort + limit", "count", "unindexed filter", "unindexed contains", "relationship equality",
                            "top of a to-one", "search within a to-one", "to-many membership", "key lookup of many", "to-many traversal", "group-by", "update batch", "delete batch", "mixed", "batch requests"]

    var selectedSteps: [String]? {
        only.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
    }

    func run() throws {
        var all: [Measurement] = []
        var notes: [String] = []
        for size in try options.sizes {
            let cold = selectedSteps.map { $0.contains("cold point faults") } ?? true
            // The batch requests make their own files: run alone, they need no loaded dataset.
            let loads = selectedSteps.map { $0 != ["batch requests"] } ?? true
            let prepared = try Preparation.prepare(size: size, options: options, coldFaults: cold ? seconds : nil, loading: loads)
            notes.append(prepared.summary)
            all += prepared.loadMeasurements
            var workloads = Workloads(lmdb: prepared.lmdb, grdb: prepared.grdb, raw: RawSide(store: prepared.lmdb.store),
                                      dataset: prepared.dataset, budget: seconds)
            let steps: [(String, (inout Workloads) throws -> Void)] = [
                ("point faults", { try $0.pointFaults() }), ("indexed equality", { try $0.indexedEquality() }),
                ("loaded fetch", { try $0.loadedFetch() }),
                ("range + sort + limit", { try $0.rangeSortLimit() }), ("count", { try $0.countRange() }),
                ("unindexed filter", { try $0.unindexedFilter() }), ("unindexed contains", { try $0.unindexedContains() }),
                ("relationship equality", { try $0.relationshipEquality() }), ("top of a to-one", { try $0.topOfToOne() }),
                ("search within a to-one", { try $0.searchWithinToOne() }),
                ("to-many membership", { try $0.toManyMembership() }),
                ("key lookup of many", { try $0.keyLookupOfMany() }),
                ("to-many traversal", { try $0.toManyTraversal() }),
                ("group-by", { try $0.groupBy() }), ("update batch", { try $0.updateBatch() }),
                ("delete batch", { try $0.insertAndDeleteBatch() }), ("mixed", { [readers] in try $0.mixedReadWrite(readers: readers) }),
                ("batch requests", { [options] in try $0.batchRequests(lmdbOptions: options.lmdbOptions, durability: options.durability) }),
            ]
            // "cold point faults" ran in `prepare`, before the stores were opened for these steps. `--only` checks
            // names against `stepNames`: a step missing there could not be chosen.
            precondition(steps.map(\.0) == Self.stepNames.filter { $0 != "cold point faults" }, "stepNames and the steps disagree")
            let chosen = steps.filter { step in selectedSteps.map { $0.contains(step.0) } ?? true }
            for (index, (label, step)) in chosen.enumerated() {
                Progress.show("\(size) objects: \(label)", fraction: Double(index) / Double(chosen.count))
                try step(&workloads)
            }
            Progress.finish()
            all += workloads.results
            notes += workloads.notes
            let lmdbBytes = fileSize(prepared.lmdb.url), sqliteBytes = fileSize(prepared.grdb.url)
            let compacted = try compactedSize(of: prepared.lmdb.url)
            notes.append("Peak RSS \(formatBytes(peakResidentBytes())); LMDB file \(formatBytes(lmdbBytes)) "
                         + "(\(ratio(lmdbBytes, sqliteBytes)) SQLite's), \(formatBytes(compacted)) compacted "
                         + "(\(ratio(compacted, sqliteBytes)); `lmdbstore compact`, as SQLite's VACUUM), SQLite files \(formatBytes(sqliteBytes)).")
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(all), as: UTF8.self))
        } else {
            print(Table.render(all, notes: notes, settings: settings))
        }
        if let report { try Report.write(all, notes: notes, settings: settings, to: URL(fileURLWithPath: report)) }
    }

    var settings: String { options.settings }
}

extension CommonOptions {
    /// The run's settings in one line, for the tables and reports.
    var settings: String {
        "LMDBStore: LMDB \(durability == "full" ? "fully durable" : "noSync")\(readAhead == "off" ? ", no read-ahead" : ""); \(GRDBSide.settings(durability: durability)); "
            + "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(formatBytes(Int(ProcessInfo.processInfo.physicalMemory))) memory; "
            + "seed \(seed), load batches of \(batch)."
    }
}

/// A dataset loaded into both systems, reused from `--data` when it was generated before.
struct Preparation {
    let dataset: Dataset
    let lmdb: LMDBSide
    let grdb: GRDBSide
    var loadMeasurements: [Measurement] = []
    var summary: String

    /// Generates the dataset unless `--data` holds it; with `coldFaults` (a time budget), measures point faults on
    /// a cold cache before opening both systems for the other workloads. Without `loading`, both systems are opened
    /// on empty files instead (in `--data`'s folder `empty`, made anew), for workloads that make their own.
    static func prepare(size: Int, options: CommonOptions, coldFaults: Double? = nil, loading: Bool = true) throws -> Preparation {
        let dataset = Dataset(employees: size, seed: options.seed)
        guard loading else {
            let folder = URL(fileURLWithPath: options.data).appendingPathComponent("empty")
            try? FileManager.default.removeItem(at: folder)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let lmdb = try LMDBSide(url: folder.appendingPathComponent("store.lmdb"), options: options.lmdbOptions)
            let grdb = try GRDBSide(url: folder.appendingPathComponent("store.sqlite"), durability: options.durability)
            return Preparation(dataset: dataset, lmdb: lmdb, grdb: grdb, summary: "\(size) objects: no dataset loaded (the batch requests make their own files).")
        }
        let folder = URL(fileURLWithPath: options.data).appendingPathComponent("\(size)-\(options.seed)-\(options.durability)-v\(Dataset.version)")
        let marker = folder.appendingPathComponent("complete")
        let reuse = FileManager.default.fileExists(atPath: marker.path)
        if !reuse {
            try? FileManager.default.removeItem(at: folder)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        let lmdbURL = folder.appendingPathComponent("store.lmdb"), grdbURL = folder.appendingPathComponent("store.sqlite")
        var measurements: [Measurement] = []
        if !reuse {
            // Loaded in a scope of their own: both systems are closed afterwards, so nothing of them stays mapped.
            let lmdb = try LMDBSide(url: lmdbURL, options: options.lmdbOptions)
            let grdb = try GRDBSide(url: grdbURL, durability: options.durability)
            let total = size + dataset.departments + dataset.projects
            for (system, load) in [("LMDBStore", { (progress: (Int) -> Void) in try lmdb.load(dataset, batchSize: options.batch, progress: progress) }),
                                   ("GRDB", { (progress: (Int) -> Void) in try grdb.load(dataset, batchSize: options.batch, progress: progress) })] {
                let clock = ContinuousClock()
                let start = clock.now
                try load { done in Progress.show("\(size) objects: loading \(system)", fraction: Double(min(done, size)) / Double(size)) }
                let elapsed = clock.now - start
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                measurements.append(Measurement(workload: "bulk load (batches of \(options.batch), \(BenchModel.model.fetchIndexes(of: "Employee").count) indexes)", system: system,
                                                objects: size, operations: total, seconds: seconds, p50: nil, p99: nil, p999: nil))
            }
            Progress.finish()
            try Data().write(to: marker)
        }
        if let budget = coldFaults {
            Progress.show("\(size) objects: cold point faults", fraction: 0)
            measurements += try ColdFaults(dataset: dataset, lmdbURL: lmdbURL, grdbURL: grdbURL, lmdbOptions: options.lmdbOptions,
                                           grdbDurability: options.durability, budget: budget).run()
            Progress.finish()
        }
        let lmdb = try LMDBSide(url: lmdbURL, options: options.lmdbOptions)
        let grdb = try GRDBSide(url: grdbURL, durability: options.durability)
        return Preparation(dataset: dataset, lmdb: lmdb, grdb: grdb, loadMeasurements: measurements,
                           summary: reuse ? "\(size) objects: reusing the dataset in \(folder.path)."
                               : "\(size) objects: generated in \(folder.path) (\(dataset.departments) departments, \(dataset.projects) projects).")
    }
}

/// A one-line progress bar on a terminal; silent when output is piped.
enum Progress {
    static let isTerminal = isatty(STDERR_FILENO) != 0

    static func show(_ label: String, fraction: Double) {
        guard isTerminal else { return }
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(Data("\r[\(bar)] \(Int(fraction * 100))% \(label)\u{1B}[K".utf8))
    }

    static func finish() {
        guard isTerminal else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

/// `part / whole` as "1.23×".
func ratio(_ part: Int, _ whole: Int) -> String {
    whole > 0 ? String(format: "%.2f×", Double(part) / Double(whole)) : "–"
}

/// The size a compaction would leave the open store at `url`: a compacted copy written beside it, measured and removed
/// (the store stays as it is for the workloads that reuse it).
func compactedSize(of url: URL) throws -> Int {
    let copy = url.path + ".bench-compacted"
    try? FileManager.default.removeItem(atPath: copy)
    defer { try? FileManager.default.removeItem(atPath: copy) }
    try Environment.open(at: url.path).copy(to: copy, compacting: true)
    return fileSize(URL(fileURLWithPath: copy))
}

func formatBytes(_ bytes: Int) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
    return String(format: unit == 0 ? "%.0f %@" : "%.1f %@", value, units[unit])
}
