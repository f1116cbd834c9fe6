import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// An LMDB store over `batchModel` with departments D0–D2 and projects P0–P3.
private func companyStore(_ folder: StoreFolder) throws -> ManagedObjectContext {
    let context = ManagedObjectContext(coordinator: try folder.coordinator(batchModel).0)
    try seed(context)
    return context
}

private func employees(_ context: ManagedObjectContext, _ format: String = "TRUEPREDICATE") throws -> [ManagedObject] {
    var request = FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: format))
    request.sortDescriptors = [FetchSortDescriptor(keyPath: "name")]
    return try context.fetch(request)
}

private func write(_ text: String, to folder: StoreFolder, _ name: String) throws -> URL {
    let url = folder.file(name)
    try Data(text.utf8).write(to: url)
    return url
}

@Suite("Importing JSON Lines and CSV")
struct BatchImportTests {
    @Test("JSON Lines: values converted to their types, relationships by unique value, blank lines skipped")
    func jsonLines() throws {
        let folder = StoreFolder()
        let context = try companyStore(folder)
        let url = try write("""
            {"name": "Ada", "email": "ada@example.com", "age": 36, "hired": "2024-03-01T12:00:00Z", "department": "D1", "projects": ["P0", "P2"]}

            {"name": "Brian", "email": null, "age": "41", "department": "D2", "projects": []}
            {"name": "Cleo", "department": "D1"}
            """, to: folder, "people.jsonl")
        var request = BatchImport(entityName: "Employee", contentsOf: url, format: .jsonLines)
        request.chunkSize = 2
        request.resultType = .count
        #expect(try context.execute(request).count == 3)
        let found = try employees(context)
        #expect(found.map { $0.value(forKey: "name") as? String } == ["Ada", "Brian", "Cleo"])
        #expect(found.map { $0.value(forKey: "age") as? Int16 } == [36, 41, 30])
        #expect(found[0].value(forKey: "hired") as? Date == Date(timeIntervalSince1970: 1_709_294_400))
        #expect(found[1].value(forKey: "email") == nil)
        #expect(found.map { ($0.value(forKey: "department") as? ManagedObject)?.value(forKey: "name") as? String } == ["D1", "D2", "D1"])
        // A byte-order mark before the first line, as some editors write one, and CRLF line ends.
        let marked = [0xEF, 0xBB, 0xBF] + Array("{\"name\": \"Dan\", \"age\": 50}\r\n{\"name\": \"Eve\"}\r\n".utf8)
        #expect(try context.execute(BatchImport(entityName: "Employee", bytes: marked, format: .jsonLines)).isComplete)
        #expect(try employees(context, "name IN {'Dan', 'Eve'}").count == 2)
        #expect(found[0].relatedObjects(forKey: "projects").map { $0.value(forKey: "code") as? String }.sorted { ($0 ?? "") < ($1 ?? "") } == ["P0", "P2"])
    }

    @Test("CSV: a header names the columns, a mapping renames them, quoted fields keep commas and line breaks")
    func csv() throws {
        let folder = StoreFolder()
        let context = try companyStore(folder)
        let url = try write("Full Name,email,age,department,note\r\n\"Doe, Jane\",jane@example.com,29,D0,x\r\n\"Multi\nLine\",,44,D2,\"\"\r\n",
                            to: folder, "people.csv")
        var request = BatchImport(entityName: "Employee", contentsOf: url, format: .csv)
        request.columnMapping = ["Full Name": "name"]
        // An unknown column stops the import, unless it is to be skipped.
        let unknown = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(unknown.code == .unknownName && unknown.message.contains("line 1 of people.csv: the column \"note\""), "\(unknown)")
        request.ignoresUnknownColumns = true
        #expect(try context.execute(request).isComplete)
        let found = try employees(context)
        #expect(found.map { $0.value(forKey: "name") as? String } == ["Doe, Jane", "Multi\nLine"])
        #expect(found[1].value(forKey: "email") == nil, "an empty unquoted field is NULL")
        #expect((found[1].value(forKey: "department") as? ManagedObject)?.value(forKey: "name") as? String == "D2")
    }

    @Test("a value, a line or a row that cannot be imported is named by file, line and column, and nothing is written", arguments: [
        (BatchImport.Format.csv, "name,age\nA,30\nB,abc\n", "line 3 of bad, column \"age\": \"abc\" is not an integer"),
        (.csv, "name,age\nA,30\nB\n", "line 3 of bad: 1 field, but the header names 2 columns"),
        (.csv, "name,age\nA,30\n\"B,31\n", "line 3 of bad: not CSV: a quoted field is not closed"),
        (.csv, "name,projects\nA,P1\n", "the column \"projects\" sets the to-many projects"),
        (.jsonLines, "{\"name\": \"A\"}\n{\"name\": \"B\",}\n", "line 2 of bad: not JSON"),
        (.jsonLines, "{\"name\": \"A\"}\n[1, 2]\n", "line 2 of bad: an array, not a JSON object"),
        (.jsonLines, "{\"name\": \"A\"}\n\n{\"age\": 40}\n", "line 3 of bad of the batch insert into Employee: name: a value is required"),
        (.jsonLines, "{\"name\": \"A\", \"email\": \"a@x\"}\n{\"name\": \"B\", \"email\": \"a@x\"}\n", "line 2 of bad of the batch insert into Employee: Employee (email) = (\"a@x\") is already taken"),
        (.jsonLines, "{\"name\": \"A\", \"department\": \"D9\"}\n", "line 1 of bad of the batch insert into Employee: Employee.department points at the Department whose name is \"D9\""),
        (.jsonLines, "{\"name\": \"A\", \"projects\": \"P1\"}\n", "line 1 of bad, column \"projects\": projects is a to-many relationship"),
    ])
    func badInput(format: BatchImport.Format, text: String, expected: String) throws {
        let folder = StoreFolder()
        let context = try companyStore(folder)
        let error = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchImport(entityName: "Employee", bytes: Array(text.utf8), format: format, name: "bad"))
        }
        #expect(error.message.contains(expected), "\(error.message)")
        #expect(try employees(context).isEmpty)
    }

    @Test("a file larger than a read block streams through; with chunks committed, an error keeps the chunks before it")
    func largeFiles() throws {
        let folder = StoreFolder()
        let context = try companyStore(folder)
        // 30 000 lines of about 70 bytes: two read blocks; line 25 000 has an age out of bounds.
        var text = ""
        for n in 1...30_000 {
            text += "{\"name\": \"E\(n)\", \"email\": \"e\(n)@example.com\", \"age\": \(n == 25_000 ? 120 : 18 + n % 60), \"department\": \"D\(n % 3)\"}\n"
        }
        let url = try write(text, to: folder, "many.jsonl")
        var request = BatchImport(entityName: "Employee", contentsOf: url, format: .jsonLines)
        request.chunkSize = 1_000
        request.commitsEachChunk = true
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message.contains("line 25000 of many.jsonl") && error.message.contains("the 24000 rows before its chunk were inserted and stay"), "\(error.message)")
        #expect(try context.count(for: FetchRequest(entityName: "Employee")) == 24_000)

        // The rows left as CSV, a quoted line break in every record's name: about 1.2 MB, so read blocks end inside
        // records and quoted fields.
        var csv = "name,email,age\n"
        let padding = String(repeating: "x", count: 150)
        for n in 24_001...30_000 { csv += "\"E\(n) \(padding)\nsecond line\",e\(n)@example.com,\(18 + n % 60)\n" }
        var rest = BatchImport(entityName: "Employee", contentsOf: try write(csv, to: folder, "rest.csv"), format: .csv)
        rest.chunkSize = 700
        rest.resultType = .count
        #expect(try context.execute(rest).count == 6_000)
        #expect(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name ENDSWITH 'second line'"))) == 6_000)
    }

    @Test("a CSV file of CR line endings is read a block at a time, and a CRLF split between two blocks ends one record")
    func carriageReturns() throws {
        let folder = StoreFolder()
        let context = try companyStore(folder)
        // About 2.3 MB of records ended by a CR alone (old Mac files): record 24 999 (line 25 000) has an age out of
        // bounds.
        var text = "name,email,age\r"
        for n in 1...30_000 { text += "E\(n) \(String(repeating: "y", count: 50)),e\(n)@example.com,\(n == 24_999 ? 120 : 18 + n % 60)\r" }
        let url = try write(text, to: folder, "mac.csv")
        var request = BatchImport(entityName: "Employee", contentsOf: url, format: .csv)
        request.chunkSize = 1_000
        // The first row is read with one block in memory, not the file.
        let reader = try ImportReader(request, model: context.persistentStoreCoordinator.managedObjectModel)
        var row = BatchRowValues(count: reader.properties.count)
        #expect(try reader.next(into: &row) == false)
        #expect(row[try #require(reader.properties.firstIndex(of: "name"))] == .attribute(.string("E1 \(String(repeating: "y", count: 50))")))
        #expect(reader.bufferedByteCount <= 1 << 20 && text.utf8.count > 2 << 20, "\(reader.bufferedByteCount) bytes held")
        // Lines are counted at CRs: the bad value is named by its line, and nothing is written.
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message.contains("line 25000 of mac.csv"), "\(error.message)")
        #expect(try employees(context).isEmpty)

        // CRLF line endings with one CRLF split between the first read block (1 MiB) and the second: the CR that ends
        // the first block waits for the LF, so no empty record is read between them.
        var crlf = "name,email,age\r\n"
        var n = 0
        while crlf.utf8.count < (1 << 20) - 200 {
            n += 1
            crlf += "F\(n),f\(n)@example.com,30\r\n"
        }
        // A last record before the boundary, padded so that its CR is the block's last byte.
        let prefix = "F\(n + 1) ", suffix = ",f\(n + 1)@example.com,30"
        let padding = (1 << 20) - 1 - crlf.utf8.count - prefix.utf8.count - suffix.utf8.count
        crlf += prefix + String(repeating: "z", count: padding) + suffix + "\r\n"
        #expect(Array(crlf.utf8)[(1 << 20) - 1] == 0x0D && Array(crlf.utf8)[1 << 20] == 0x0A)
        for m in (n + 2)...(n + 1_000) { crlf += "F\(m),f\(m)@example.com,31\r\n" }
        // A bad value after the split is named by its line: the split CRLF counts as one line break.
        let bad = crlf + "F\(n + 1_001),f\(n + 1_001)@example.com,120\r\n"
        let badError = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchImport(entityName: "Employee", contentsOf: try write(bad, to: folder, "bad.csv"), format: .csv))
        }
        #expect(badError.message.contains("line \(n + 1_002) of bad.csv"), "\(badError.message)")
        var split = BatchImport(entityName: "Employee", contentsOf: try write(crlf, to: folder, "split.csv"), format: .csv)
        split.resultType = .count
        #expect(try context.execute(split).count == n + 1_000)
        #expect(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name BEGINSWITH 'F' AND name ENDSWITH 'z'"))) == 1)
    }
}
