import Foundation

/// An atomic store kept as a folder of CSV files, one per entity, that a spreadsheet or another program can read
/// and write; `Docs/ATOMIC-STORES.md` describes the format. Registered with every coordinator as `"CSV"`.
///
/// ```
/// People/
///   metadata.json      {"NSStoreType": "CSV", "NSStoreUUID": "…", …}
///   Item.csv           @id,name,rank,owner,labels
///                      1,first,3,1,2 5
/// ```
///
/// The header names the columns (`@id`, then attributes, then the relationships kept on this side); quoting follows
/// RFC 4180. An empty field is NULL and `""` is an empty string; a to-many field lists record ids separated by spaces.
///
/// A save writes every file anew and commits them together: new files are written and flushed under temporary
/// names, then a commit marker is written, then the files are renamed into place and the marker removed. Opening
/// the store finishes a save that was committed but interrupted, and discards one that was not, so the folder
/// always reads as the last complete save.
public final class CSVStore: AtomicStore, @unchecked Sendable {
    /// The type string the store is registered under.
    public static let storeType = "CSV"
    /// The name of the metadata file in the store's folder.
    public static let metadataFileName = "metadata.json"
    static let commitFileName = ".commit"

    private let layout: AtomicRecordLayout
    private var createdFolder = false
    private var hasWritten = false

    /// Creates a store in the description's folder; used by the coordinator.
    ///
    /// - Throws: ``ManagedObjectContextError`` when the description has no file URL.
    public init(description: PersistentStoreCoordinator.StoreDescription) throws {
        layout = AtomicRecordLayout(model: description.model, configuration: description.configurationName)
        try super.init(description: description, type: Self.storeType)
    }

    private var folder: URL { fileURL }

    /// The folder's `metadata.json`.
    public override var metadataFileURL: URL { file(Self.metadataFileName) }

    private func file(_ name: String) -> URL { folder.appendingPathComponent(name) }

    /// The metadata of the CSV store in the folder at `url`, read without loading its records.
    ///
    /// - Throws: ``StoreFileError`` when the metadata file cannot be read.
    public static func metadata(at url: URL) throws -> [String: String] {
        try readMetadata(url.appendingPathComponent(metadataFileName))
    }

    private static func readMetadata(_ url: URL) throws -> [String: String] {
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: url))
        } catch {
            throw StoreFileError(.io, url: url, reason: "cannot be read: \(error.localizedDescription)")
        }
        if bytes.isEmpty { return [:] }
        let document: JSONValue
        do {
            document = try JSONText.parse(bytes)
        } catch {
            throw StoreFileError(.malformed, url: url, line: error.line, reason: "is not JSON: \(error.reason) (column \(error.column))")
        }
        guard case .object(let members, let line) = document else {
            throw StoreFileError(.malformed, url: url, line: 1, reason: "holds \(document.kindName), not an object of strings")
        }
        var metadata: [String: String] = [:]
        for (key, value) in members {
            guard case .string(let text) = value else {
                throw StoreFileError(.malformed, url: url, line: line, field: key, reason: "is \(value.kindName), not a string")
            }
            metadata[key] = text
        }
        return metadata
    }

    // MARK: - Location

    /// Whether the folder is missing, or holds neither metadata nor CSV files (or only a zero-length metadata file).
    ///
    /// - Throws: ``StoreFileError`` when the location is a file, not a folder.
    public override func isEmptyLocation() throws -> Bool {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder) else { return true }
        guard isFolder.boolValue else { throw StoreFileError(.io, url: folder, reason: "is a file; a CSV store is a folder") }
        try recover()
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        if names.contains(where: { $0.hasSuffix(".csv") }) { return false }
        guard names.contains(Self.metadataFileName) else { return true }
        let size = (try? FileManager.default.attributesOfItem(atPath: file(Self.metadataFileName).path)[.size] as? NSNumber)?.intValue ?? 0
        return size == 0
    }

    /// Creates the folder when it is missing.
    ///
    /// - Throws: ``StoreFileError`` when the folder cannot be created.
    public override func prepareNewStore() throws {
        guard !FileManager.default.fileExists(atPath: folder.path) else { return }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        } catch {
            throw StoreFileError(.io, url: folder, reason: "cannot create the store's folder: \(error.localizedDescription)")
        }
        createdFolder = true
    }

    /// Removes the folder the store created if nothing was ever saved to it.
    public override func willRemoveFromPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator?) {
        guard createdFolder, !hasWritten, (try? FileManager.default.contentsOfDirectory(atPath: folder.path))?.isEmpty == true else { return }
        try? FileManager.default.removeItem(at: folder)
        createdFolder = false
    }

    /// Finishes a committed save that was interrupted, or discards the files of one that was not committed.
    private func recover() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        if names.contains(Self.commitFileName) {
            let listed = (try? String(contentsOf: file(Self.commitFileName), encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
            for name in listed where names.contains(AtomicFile.temporaryURL(for: file(name)).lastPathComponent) {
                try AtomicFile.replace(file(name), with: AtomicFile.temporaryURL(for: file(name)))
            }
            AtomicFile.syncFolder(of: file(Self.commitFileName))
            try? FileManager.default.removeItem(at: file(Self.commitFileName))
        }
        for name in names where name.hasPrefix(".") && name.hasSuffix(".saving") {
            try? FileManager.default.removeItem(at: file(name))
        }
    }

    // MARK: - Loading

    /// Reads `metadata.json` (checked against this store type and model), then each entity's CSV file.
    ///
    /// - Throws: ``StoreFileError`` naming the file, line, record and field of the first problem.
    public override func load() throws {
        if FileManager.default.fileExists(atPath: file(Self.metadataFileName).path) {
            metadata.merge(try Self.readMetadata(file(Self.metadataFileName))) { _, stored in stored }
        }
        try checkMetadata()
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".csv") {
            let entityName = String(name.dropLast(4))
            guard layout.entityNames.contains(entityName) else {
                throw StoreFileError(.foreignFile, url: file(name), reason: model.entity(named: entityName)?.isAbstract == true
                    ? "\(entityName) is abstract, so it has no records of its own" : "\(entityName) is not an entity this store holds")
            }
        }
        var records: [FileRecord] = []
        for entityName in layout.entityNames {
            let url = file(entityName + ".csv")
            guard FileManager.default.fileExists(atPath: url.path) else { continue }
            records += try self.records(of: entityName, at: url)
        }
        addCacheNodes(try layout.makeNodes(records, store: self, url: folder))
    }

    private enum Column {
        case key
        case attribute(AttributeDescription)
        case relationship(RelationshipDescription)
    }

    private func records(of entityName: String, at url: URL) throws -> [FileRecord] {
        let rows: [CSVRecord]
        do {
            rows = try CSVText.parse(Array(try Data(contentsOf: url)))
        } catch let error as CSVSyntaxError {
            throw StoreFileError(.malformed, url: url, line: error.line, reason: "is not CSV: \(error.reason)")
        } catch {
            throw StoreFileError(.io, url: url, reason: "cannot be read: \(error.localizedDescription)")
        }
        guard let header = rows.first else { return [] }
        var columns: [Column] = []
        var seen = Set<String>()
        for field in header.fields {
            let name = field.text
            guard seen.insert(name).inserted else {
                throw StoreFileError(.malformed, url: url, line: header.line, field: name, reason: "the header names this column twice")
            }
            if name == AtomicRecordLayout.keyField {
                columns.append(.key)
            } else if let attribute = model.attribute(named: name, in: entityName), !attribute.isTransient {
                columns.append(.attribute(attribute))
            } else if let relationship = model.relationship(named: name, in: entityName), !relationship.isTransient {
                guard layout.isWritten(relationship) else {
                    throw StoreFileError(.malformed, url: url, line: header.line, field: name,
                                         reason: "is kept on the other side, as \(layout.writtenSide(of: relationship)); leave the column out")
                }
                columns.append(.relationship(relationship))
            } else {
                throw StoreFileError(.wrongValueType, url: url, line: header.line, field: name, reason: "\(entityName) has no stored attribute or relationship of this name")
            }
        }
        guard seen.contains(AtomicRecordLayout.keyField) else {
            throw StoreFileError(.malformed, url: url, line: header.line, reason: "the header has no \(AtomicRecordLayout.keyField) column (each record's key)")
        }
        let keyColumn = header.fields.firstIndex { $0.text == AtomicRecordLayout.keyField }!
        var records: [FileRecord] = []
        for row in rows.dropFirst() {
            guard row.fields.count == columns.count else {
                throw StoreFileError(.malformed, url: url, line: row.line, reason: "has \(row.fields.count) fields, but the header names \(columns.count) columns")
            }
            let key = row.fields[keyColumn].text
            guard !key.isEmpty, !key.contains(where: \.isWhitespace) else {
                throw StoreFileError(.malformed, url: url, line: row.line, field: AtomicRecordLayout.keyField,
                                     reason: key.isEmpty ? "a record has no key" : "the key \"\(key)\" holds a space (to-many fields separate keys with spaces)")
            }
            var record = FileRecord(entityName: entityName, reference: Self.reference(key), url: url, line: row.line)
            for (column, field) in zip(columns, row.fields) {
                func fail(_ kind: StoreFileError.Kind, _ name: String, _ reason: String) -> StoreFileError {
                    StoreFileError(kind, url: url, line: row.line, record: record.label, field: name, reason: reason)
                }
                switch column {
                case .key:
                    continue
                case .attribute(let attribute):
                    if field.text.isEmpty && !field.quoted { continue }
                    switch AttributeText.parse(field.text, as: attribute.type) {
                    case .success(let value): record.attributes[attribute.name] = value
                    case .failure(let problem):
                        throw fail(.wrongValueType, attribute.name, problem.reason + " (\(attribute.name) is \(attribute.type.coreDataName))")
                    }
                case .relationship(let relationship):
                    let references = field.text.split(separator: " ", omittingEmptySubsequences: true).map { Self.reference(String($0)) }
                    if !relationship.isToMany && references.count > 1 {
                        throw fail(.wrongValueType, relationship.name, "lists \(references.count) record ids, but a to-one holds one")
                    }
                    record.relationships[relationship.name] = references
                }
            }
            records.append(record)
        }
        return records
    }

    private static func reference(_ text: String) -> ReferenceObject {
        Int64(text).map(ReferenceObject.integer) ?? .string(text)
    }

    // MARK: - Saving

    /// Writes every entity's file and the metadata, and commits them together.
    ///
    /// - Throws: ``StoreFileError`` when a file cannot be written; the folder then still reads as the last save.
    public override func save() throws {
        var files: [(name: String, bytes: [UInt8])] = []
        var metadataText = ""
        JSONText.appendStringObject(metadata, indent: "  ", to: &metadataText)
        metadataText += "\n"
        files.append((Self.metadataFileName, Array(metadataText.utf8)))
        let byEntity = Dictionary(grouping: cacheNodes, by: \.objectID.entityName)
        for entityName in layout.entityNames {
            let attributes = layout.attributes(of: entityName), relationships = layout.writtenRelationships(of: entityName)
            var text = ""
            CSVText.appendRecord([AtomicRecordLayout.keyField] + attributes.map(\.name) + relationships.map(\.name), to: &text)
            for node in byEntity[entityName] ?? [] {
                var fields: [String?] = [AtomicRecordLayout.text(of: node.objectID.referenceObject)]
                for attribute in attributes { fields.append(node.attributes[attribute.name].map(AttributeText.format)) }
                for relationship in relationships {
                    let members = node.destinations(forRelationship: relationship.name)
                    fields.append(members.isEmpty ? nil : members.map { AtomicRecordLayout.text(of: $0.referenceObject) }.joined(separator: " "))
                }
                CSVText.appendRecord(fields, to: &text)
            }
            files.append((entityName + ".csv", Array(text.utf8)))
        }
        for (name, bytes) in files { _ = try AtomicFile.writeTemporary(bytes, for: file(name)) }
        try StoreFileTesting.checkpoint("beforeCommit", at: folder)
        try AtomicFile.save(Array(files.map(\.name).joined(separator: "\n").utf8), to: file(Self.commitFileName))
        hasWritten = true
        try StoreFileTesting.checkpoint("afterCommit", at: folder)
        // Committed: the save has happened. If a rename fails now, the marker stays and opening the store finishes
        // the renames, so this save still reports success.
        do {
            for (name, _) in files { try AtomicFile.replace(file(name), with: AtomicFile.temporaryURL(for: file(name))) }
        } catch {
            return
        }
        AtomicFile.syncFolder(of: file(Self.commitFileName))
        try? FileManager.default.removeItem(at: file(Self.commitFileName))
    }
}
