import Foundation

/// A file of rows — JSON Lines or CSV — imported into one entity as a batch insert, read a block at a time so an
/// import of any size holds one chunk of rows (run it with ``ManagedObjectContext/execute(_:fallback:)-(BatchImport,_)``).
///
/// Each column (a CSV header's name, a JSON object's key) sets the property of its name, or the one
/// ``columnMapping`` names. Values are converted to the property's type from their text: numbers, `true`/`false`, ISO
/// 8601 dates (`2024-03-01T12:00:00Z`), UUIDs, base64 data. A to-one column holds the value of the destination's
/// uniqueness constraint on one attribute (`"department": "Sales"`); in JSON Lines a to-many column holds an array of
/// such values. NULL is an empty unquoted CSV field or JSON `null`. A value that does not convert, a row the model
/// refuses (a required value missing, a rule broken, a unique value taken) or a line that is not CSV or JSON stops
/// the import with an error naming the file, the line and the column; as for any batch insert, nothing is written
/// then unless ``commitsEachChunk``.
public struct BatchImport {
    /// How the file holds its rows.
    public enum Format: Sendable, Hashable {
        /// One JSON object per line, its keys the columns; blank lines are skipped.
        case jsonLines
        /// RFC 4180 CSV (UTF-8, comma-separated, `"`-quoted) whose first record names the columns; records end with
        /// CRLF, LF or a CR alone.
        case csv
    }

    enum Source {
        case file(URL)
        case bytes([UInt8])
    }

    /// The entity whose objects the rows become.
    public var entityName: String
    /// The file's format.
    public var format: Format
    /// The property each column sets, by column name; a column not named here sets the property of its own name.
    public var columnMapping: [String: String] = [:]
    /// Whether columns that set no stored property are skipped; by default they stop the import with an error.
    public var ignoresUnknownColumns = false
    /// How many rows are written at a time (``BatchInsertRequest/chunkSize``). Default: 10 000.
    public var chunkSize = 10_000
    /// Whether each chunk is committed on its own (``BatchInsertRequest/commitsEachChunk``). Default: `false`. A
    /// file's rows are read once: an import in one transaction that outgrows the room a store has (the LMDB store's
    /// map) stops with nothing written, so a large import should commit each chunk.
    public var commitsEachChunk = false
    /// Called after each chunk (``BatchInsertRequest/progressHandler``); `false` stops the import.
    public var progressHandler: ((BatchProgress) -> Bool)?
    /// What the result reports. Default: ``BatchResultType/statusOnly``.
    public var resultType: BatchResultType = .statusOnly
    let source: Source
    /// What errors call the input: the file's name, or the name given to bytes.
    let name: String

    /// Imports the file at `url`.
    public init(entityName: String, contentsOf url: URL, format: Format) {
        self.entityName = entityName
        self.format = format
        source = .file(url)
        name = url.lastPathComponent
    }

    /// Imports `bytes`, called `name` in errors.
    public init(entityName: String, bytes: [UInt8], format: Format, name: String = "the import") {
        self.entityName = entityName
        self.format = format
        source = .bytes(bytes)
        self.name = name
    }
}

extension ManagedObjectContext {
    /// Imports a file's rows into the store that holds the import's entity, as one batch insert
    /// (``execute(_:fallback:)-(BatchInsertRequest,_)``).
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the file, line and column of the first value or row that cannot
    ///   be imported (``ManagedObjectContextError/Code/wrongValueType`` for a value or line that does not read,
    ///   ``ManagedObjectContextError/Code/unknownName`` for a column that sets no property), or what the batch insert
    ///   throws; a file that cannot be read.
    public func execute(_ request: BatchImport, fallback: BatchFallback = .fail) throws -> BatchResult {
        let reader = try ImportReader(request, model: model)
        // Every stored property has a position: a column, once its property is known, fills its position.
        var insert = BatchInsertRequest(entityName: request.entityName, properties: reader.properties) { row in try reader.next(into: &row) }
        insert.chunkSize = request.chunkSize
        insert.commitsEachChunk = request.commitsEachChunk
        insert.progressHandler = request.progressHandler
        insert.resultType = request.resultType
        insert.rowName = { [reader] position in reader.name(ofRow: position) }
        return try execute(insert, fallback: fallback)
    }
}

/// Reads an import's rows one at a time: the input a block of 1 MiB at a time, each row's columns converted to
/// ``BatchValue``s for their properties. Remembers the line of the rows of the last two chunks, for errors about them.
final class ImportReader {
    private let request: BatchImport
    private let entity: ManagedObjectModel.EntityHandle
    private let model: ManagedObjectModel
    private let file: FileHandle?
    private var buffer: [UInt8] = []
    private var position = 0
    private var exhausted = false
    /// The line the unread bytes start on.
    private var line = 1
    /// CSV: the header's columns (each with what it sets), and records read but not yet handed out.
    private var header: [Column?]?
    private var records: [CSVRecord] = []
    private var recordIndex = 0
    /// JSON Lines: each key's column, worked out on first sight.
    private var columnsByKey: [String: Column?] = [:]
    /// The line of each row handed out, from the row at ``firstRemembered`` on.
    private var rowLines: [Int] = []
    private var firstRemembered = 0

    /// The stored properties of the entity, in the order of the positions a row's values take.
    let properties: [String]
    /// Each stored property's position in ``properties``, by name.
    private let positions: [String: Int]

    /// What one column sets.
    struct Column {
        let name: String
        let slot: ManagedObjectModel.Slot
        /// The position of the property it sets in a row's values.
        let position: Int
        /// The type its values are read as: the attribute's, or the destination's unique key's.
        let type: AttributeType
    }

    init(_ request: BatchImport, model: ManagedObjectModel) throws {
        guard let entity = model.existingHandle(forEntityNamed: request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        self.request = request
        self.entity = entity
        self.model = model
        properties = entity.persistentSlots.filter { $0.kind != .fetched }.map(\.name)
        positions = Dictionary(uniqueKeysWithValues: properties.enumerated().map { ($1, $0) })
        switch request.source {
        case .bytes(let bytes):
            buffer = bytes
            exhausted = true
            file = nil
        case .file(let url):
            do {
                file = try FileHandle(forReadingFrom: url)
            } catch {
                throw ManagedObjectContextError(.storeUnusable, message: "the import file \(url.path) cannot be opened: \(error.localizedDescription)")
            }
        }
    }

    deinit { try? file?.close() }

    /// "line 14 of data.csv" for a row of the last two chunks, "row 12 of data.csv" for an older one.
    func name(ofRow position: Int) -> String {
        let index = position - firstRemembered
        return rowLines.indices.contains(index) ? "line \(rowLines[index]) of \(request.name)" : "row \(position) of \(request.name)"
    }

    /// Fills `row` with the next row's values; `true` when there are no more rows.
    func next(into row: inout BatchRowValues) throws -> Bool {
        let found: Int?
        switch request.format {
        case .jsonLines: found = try nextJSONLine(into: &row)
        case .csv: found = try nextCSVRecord(into: &row)
        }
        guard let found else { return true }
        if rowLines.count >= 2 * max(request.chunkSize, 1) {
            let dropped = request.chunkSize
            rowLines.removeFirst(dropped)
            firstRemembered += dropped
        }
        rowLines.append(found)
        return false
    }

    // MARK: - Reading the input

    /// Reads the next block of the file after the unread bytes; `false` at its end.
    private func readMore() throws -> Bool {
        guard !exhausted, let file else { return false }
        let block: Data?
        do { block = try file.read(upToCount: 1 << 20) } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "\(request.name) cannot be read: \(error.localizedDescription)")
        }
        guard let block, !block.isEmpty else {
            exhausted = true
            return false
        }
        if position > 0 {
            buffer.removeFirst(position)
            position = 0
        }
        buffer.append(contentsOf: block)
        return true
    }

    private func error(_ line: Int, _ column: String?, _ message: String) -> ManagedObjectContextError {
        ManagedObjectContextError(.wrongValueType,
            message: "line \(line) of \(request.name)\(column.map { ", column \"\($0)\"" } ?? ""): \(message)")
    }

    // MARK: - JSON Lines

    /// The line of the next JSON object, its members placed in `row`; `nil` at the end.
    private func nextJSONLine(into row: inout BatchRowValues) throws -> Int? {
        while true {
            guard let end = try lineEnd() else { return nil }
            let lineNumber = line
            var bytes = Array(buffer[position..<end])
            position = min(end + 1, buffer.count)
            line += 1
            if lineNumber == 1, bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }  // a byte-order mark
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let value: JSONValue
            do {
                value = try JSONText.parse(bytes)
            } catch {
                throw self.error(lineNumber, nil, "not JSON: \(error.reason) (character \(error.column))")
            }
            guard case .object(let members, _) = value else {
                throw self.error(lineNumber, nil, "\(value.kindName), not a JSON object")
            }
            for (key, member) in members {
                guard let column = try column(key, line: lineNumber) else { continue }
                row[column.position] = try batchValue(member, for: column, line: lineNumber)
            }
            return lineNumber
        }
    }

    /// Where the unread line ends (its `\n`, or the end of the input); `nil` when nothing is left.
    private func lineEnd() throws -> Int? {
        var searched = position
        while true {
            if let newline = buffer[searched...].firstIndex(of: 0x0A) { return newline }
            // Reading more drops the bytes before `position`: what was searched is counted from it.
            let unread = buffer.count - position
            guard try readMore() else { return position < buffer.count ? buffer.count : nil }
            searched = position + unread
        }
    }

    private func column(_ key: String, line: Int) throws -> Column? {
        if let known = columnsByKey[key] { return known }
        let column = try makeColumn(key, line: line)
        columnsByKey[key] = column
        return column
    }

    private func batchValue(_ value: JSONValue, for column: Column, line: Int) throws -> BatchValue {
        switch (value, column.slot.kind) {
        case (.null, _):
            return .null
        case (.array(let elements), .toMany):
            return .uniqueValues(try elements.map { element in
                guard let text = Self.scalarText(element) else {
                    throw error(line, column.name, "\(element.kindName) in \(column.slot.name)'s list: give each member as its unique \(column.type.coreDataName) value")
                }
                return try attributeValue(text, for: column, line: line)
            })
        case (_, .toMany):
            throw error(line, column.name, "\(column.slot.name) is a to-many relationship: give an array of unique values, not \(value.kindName)")
        default:
            guard let text = Self.scalarText(value) else {
                throw error(line, column.name, "\(value.kindName), not a value for \(column.slot.name) (\(column.type.coreDataName))")
            }
            let converted = try attributeValue(text, for: column, line: line)
            return column.slot.kind == .toOne ? .uniqueValue(converted) : .attribute(converted)
        }
    }

    /// The text of a JSON string, number or Boolean.
    private static func scalarText(_ value: JSONValue) -> String? {
        switch value {
        case .string(let text), .number(let text): text
        case .bool(let flag): flag ? "true" : "false"
        case .null, .array, .object: nil
        }
    }

    // MARK: - CSV

    /// The line of the next CSV record, its fields placed in `row`; `nil` at the end. The first record is the header.
    private func nextCSVRecord(into row: inout BatchRowValues) throws -> Int? {
        if header == nil {
            guard let names = try readRecord() else {
                throw ManagedObjectContextError(.wrongValueType, message: "\(request.name) is empty: a CSV import's first line names its columns")
            }
            header = try names.fields.map { try makeColumn($0.text, line: names.line) }
        }
        guard let record = try readRecord(), let header else { return nil }
        guard record.fields.count == header.count else {
            throw error(record.line, nil, "\(record.fields.count) field\(record.fields.count == 1 ? "" : "s"), but the header names \(header.count) columns")
        }
        for (field, column) in zip(record.fields, header) {
            guard let column else { continue }
            guard field.quoted || !field.text.isEmpty else {
                row[column.position] = .null
                continue
            }
            let value = try attributeValue(field.text, for: column, line: record.line)
            row[column.position] = column.slot.kind == .toOne ? .uniqueValue(value) : .attribute(value)
        }
        return record.line
    }

    /// The next record, parsed from the bytes up to the last line break outside quotes in what is read.
    private func readRecord() throws -> CSVRecord? {
        while recordIndex == records.count {
            records.removeAll(keepingCapacity: true)
            recordIndex = 0
            var end: Int?
            while true {
                end = lastRecordEnd()
                if end != nil || exhausted { break }
                guard try readMore() else { break }
            }
            let upTo = end ?? buffer.count
            guard upTo > position else { return nil }
            do {
                (records, line) = try CSVText.parse(buffer[position..<upTo], firstLine: line)
            } catch {
                throw self.error(error.line, nil, "not CSV: \(error.reason)")
            }
            position = upTo
        }
        defer { recordIndex += 1 }
        return records[recordIndex]
    }

    /// Where the last record that ends in the unread bytes ends: after its line break (LF, CRLF, or a CR alone, as
    /// old Mac files have it) outside quotes, that is after an even number of quotes from ``position``; `nil` when no
    /// record ends yet. A CR that is the last byte read waits for the next byte (it may be a CRLF's first half), so
    /// a file of CR line endings is read a block at a time, not whole.
    private func lastRecordEnd() -> Int? {
        var end: Int?
        var quotes = 0
        for index in position..<buffer.count {
            switch buffer[index] {
            case UInt8(ascii: "\""): quotes += 1
            case 0x0A where quotes % 2 == 0: end = index + 1
            case 0x0D where quotes % 2 == 0 && index + 1 < buffer.count && buffer[index + 1] != 0x0A: end = index + 1
            default: break
            }
        }
        return end
    }

    /// How many bytes the reader holds: one read block and the part of a record before it, not the file.
    var bufferedByteCount: Int { buffer.count }

    // MARK: - Columns and values

    /// What the column `name` sets; `nil` for a column skipped.
    private func makeColumn(_ name: String, line: Int) throws -> Column? {
        let property = request.columnMapping[name] ?? name
        guard let slot = entity.slot(named: property), slot.isPersistent, slot.kind != .fetched, let position = positions[slot.name] else {
            if request.ignoresUnknownColumns { return nil }
            throw ManagedObjectContextError(.unknownName,
                message: "line \(line) of \(request.name): the column \"\(name)\" sets no stored property of \(request.entityName); map it with `columnMapping` or set `ignoresUnknownColumns`")
        }
        switch slot.kind {
        case .attribute:
            return Column(name: name, slot: slot, position: position, type: slot.type)
        case .toOne, .toMany:
            if slot.kind == .toMany && request.format == .csv {
                throw ManagedObjectContextError(.unsupportedRequest,
                    message: "line \(line) of \(request.name): the column \"\(name)\" sets the to-many \(slot.name), which a CSV field cannot list; import it from JSON Lines")
            }
            let key = try model.batchUniqueKey(of: slot, from: request.entityName).key
            return Column(name: name, slot: slot, position: position, type: key.type)
        case .fetched:
            return nil
        }
    }

    private func attributeValue(_ text: String, for column: Column, line: Int) throws -> AttributeValue {
        switch AttributeText.parse(text, as: column.type) {
        case .success(let value): return value
        case .failure(let problem):
            let target = column.slot.kind == .attribute ? "\(request.entityName).\(column.slot.name) is \(column.type.coreDataName)"
                : "\(column.slot.name) is matched on a \(column.type.coreDataName) unique value"
            throw error(line, column.name, "\(problem.reason) (\(target))")
        }
    }
}
