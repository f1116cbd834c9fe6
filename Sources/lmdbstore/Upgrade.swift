import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore upgrade STORE`: a file of an older format rewritten in the format this LMDBStore writes.
struct Upgrade: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upgrade a store file of an older format to the format this LMDBStore writes.",
        discussion: """
            The rows are kept; the tables whose layout changed are rebuilt (Docs/FORMAT.md, "Format versions"). The upgrade \
            is crash-safe: one interrupted is finished by the next. Afterwards an older LMDBStore cannot read the \
            file, so copy it first to keep one that can. Files before format 3 keep no model: give the one they were \
            written with. The store must not be open elsewhere.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Option(help: "The model the store was written with (.xcdatamodeld, .xcdatamodel or .json), for a file that keeps none.")
    var model: String?

    func run() throws {
        let url = try existingFile(store)
        let metadata = try LMDBIncrementalStore.readMetadata(at: url)
        guard let format = metadata[LMDBIncrementalStore.formatVersionKey].flatMap({ Int($0) }) else {
            throw ToolError("\(store) records no file format version; it is not an LMDBStore store this tool can upgrade")
        }
        let current = LMDBIncrementalStore.formatVersion
        guard format < current else {
            emit("\(store) is already in file format \(format)")
            return
        }
        let kept = try LMDBIncrementalStore.storedModel(at: url)
        let given = try model.map(modelFile)
        guard let storeModel = kept ?? given else {
            throw ToolError("\(store) (file format \(format)) keeps no model: give the one it was written with, --model App.xcdatamodeld")
        }
        if let kept, let given, kept.versionHash != given.versionHash {
            throw ToolError("\(store) keeps its own model, and \(model ?? "") is another: leave out --model (the upgrade uses the kept one), or migrate afterwards with `lmdbstore migrate`")
        }
        if storeModel.versionHashString != metadata[PersistentStoreMetadataKey.modelVersionHash] {
            throw ToolError("\(store) was written with another model than \(model ?? "the one it keeps"): give the model version it was written with")
        }
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: storeModel)
        let opened = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: [:])
        let now = opened.metadata[LMDBIncrementalStore.formatVersionKey] ?? "?"
        try coordinator.removePersistentStore(opened)
        emit("upgraded \(store) from file format \(format) to \(now)")
    }
}
