import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore migrate STORE --to MODEL`: what a migration would change (a dry run), or the migration itself.
struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Report what migrating a store to a newer model would change, or (with --apply) migrate it in place.",
        discussion: """
            The model is a Core Data .xcdatamodeld (the store steps through every version after its own, in order), \
            an .xcdatamodel or a JSON model (one lightweight step). Without --apply nothing is written. A migration \
            is crash-safe and resumable (Docs/FORMAT.md, "Migration"); the store must not be open elsewhere.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Option(help: "The model to migrate to: .xcdatamodeld, .xcdatamodel or .json.")
    var to: String

    @Flag(help: "Migrate; without it, only report what would change.")
    var apply = false

    @Option(name: .customLong("batch-size"), help: "Rows written per transaction while migrating (default 50000).")
    var batchSize: Int?

    func validate() throws {
        if let batchSize, batchSize < 1 { throw ValidationError("--batch-size must be 1 or more, not \(batchSize)") }
    }

    func run() throws {
        let url = try existingFile(store)
        let modelURL = try existingFile(to, "model")
        let stages = modelURL.pathExtension == "xcdatamodeld" ? try MigrationStage.stages(ofCoreDataModel: modelURL) : [.lightweight(try modelFile(to))]
        guard let last = stages.last else { throw ToolError("\(to) holds no model version") }
        emit(try LMDBIncrementalStore.migrationReport(at: url, to: last.model).description)
        guard apply else {
            emit("(a dry run: nothing was written; add --apply to migrate)")
            return
        }
        let bar = ProgressLine()
        let steps = try LMDBIncrementalStore.migrateStore(at: url, through: stages, options: LMDBIncrementalStore.Options(migrationBatchSize: batchSize)) {
            step, steps, progress in
            let phase = progress.phase == .staging ? "staging, part" : "installing table"
            bar.show("migrating (step \(step) of \(steps)): \(phase) \(progress.part) of \(progress.partCount)" + (progress.table.map { ", \($0)" } ?? ""))
        }
        bar.finish()
        emit(steps.isEmpty ? "\(store) already has this model" : "migrated \(store) in \(steps.count) step\(steps.count == 1 ? "" : "s")")
    }
}
