import Foundation
import ObjectGraph

/// The crash test's workload and its expected state (issue 23; RocksDB's `db_crashtest` is the model).
///
/// A writer's operations are numbered from 1 and each is a function of the writer, its number and the state before
/// it: folders inserted with their notes, indexed attributes updated, folders deleted with a cascade, notes moved
/// between folders, tags added and removed (a many-to-many), and batch inserts, updates and deletes. A writer
/// process performs them one after another and appends each number to its acknowledgement file once the save (or
/// batch request) has returned; the test kills it at random moments and checks, through the public API, that the
/// store holds exactly the state after the acknowledged operations — or after one more, whose save went through
/// just before the kill. Each writer keeps to objects whose `writer` is its own, so two writers run at once.
public enum CrashWorkload {
    /// What a writer's objects hold, by `uid`.
    public struct State: Equatable, CustomStringConvertible {
        public struct Note: Equatable {
            public var title: String
            public var rank: Int64
            public var folder: String?
            public var tags: Set<String>
        }

        /// Folder `uid` → name.
        public var folders: [String: String] = [:]
        public var notes: [String: Note] = [:]
        /// Tag `uid` → name.
        public var tags: [String: String] = [:]

        public init() {}

        public var description: String {
            let notes = notes.sorted { $0.key < $1.key }.map { uid, note in
                "\(uid)(\(note.title), \(note.rank), \(note.folder ?? "-"), [\(note.tags.sorted().joined(separator: " "))])"
            }
            return "folders: \(folders.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", "))\n"
                + "tags: \(tags.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", "))\n"
                + "notes: \(notes.joined(separator: ", "))"
        }
    }

    /// One numbered operation of a writer.
    public enum Operation: Equatable {
        case insertFolder(uid: String, name: String, notes: [NewNote])
        case updateNotes([String], titleSuffix: String, rankDelta: Int64)
        case deleteFolder(String)
        case moveNote(String, toFolder: String?)
        case retag(String, adding: [String], removing: [String])
        case insertTag(uid: String, name: String)
        case batchInsert([NewNote])
        case batchUpdate(writer: String, minimumRank: Int64, rankDelta: Int64)
        case batchDelete(writer: String, belowRank: Int64)
    }

    public struct NewNote: Equatable {
        public var uid: String
        public var title: String
        public var rank: Int64
    }

    /// The model: folders own notes (cascade), notes and tags are a many-to-many, `uid`s are unique, and notes are
    /// indexed by writer and rank and by title.
    public static let model: ManagedObjectModel = {
        try! ManagedObjectModel {
            EntityDescription("Folder") {
                AttributeDescription("uid", .string)
                AttributeDescription("writer", .string)
                AttributeDescription("name", .string, isIndexed: true)
                RelationshipDescription("notes", destination: "Note", inverse: "folder", toMany: true, deleteRule: .cascade)
                UniquenessConstraint("uid")
            }
            EntityDescription("Note") {
                AttributeDescription("uid", .string)
                AttributeDescription("writer", .string)
                AttributeDescription("title", .string, isIndexed: true)
                AttributeDescription("rank", .integer64, defaultValue: 0)
                RelationshipDescription("folder", destination: "Folder", inverse: "notes")
                RelationshipDescription("tags", destination: "Tag", inverse: "notes", toMany: true)
                UniquenessConstraint("uid")
                FetchIndexDescription("byWriterRank", elements: [.ascending("writer"), .ascending("rank")])
            }
            EntityDescription("Tag") {
                AttributeDescription("uid", .string)
                AttributeDescription("writer", .string)
                AttributeDescription("name", .string)
                RelationshipDescription("notes", destination: "Note", inverse: "tags", toMany: true)
                UniquenessConstraint("uid")
            }
        }
    }()

    // MARK: - The operations and what they do to the state

    /// A deterministic stream of numbers for operation `number` of `writer`.
    struct Dice {
        private var state: UInt64
        init(writer: String, number: Int) {
            state = UInt64(truncatingIfNeeded: number) &* 0x9E37_79B9_7F4A_7C15
            for byte in writer.utf8 { state = (state ^ UInt64(byte)) &* 0x1000_0000_01B3 }
        }
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(max(bound, 1)))
        }
        mutating func pick<T>(_ options: [T]) -> T? { options.isEmpty ? nil : options[next(options.count)] }
    }

    /// Operation `number` of `writer`, given the state after the operations before it.
    public static func operation(_ number: Int, writer: String, after state: State) -> Operation {
        var dice = Dice(writer: writer, number: number)
        let folders = state.folders.keys.sorted(), notes = state.notes.keys.sorted(), tags = state.tags.keys.sorted()
        func newNotes(_ count: Int) -> [NewNote] {
            (0..<count).map { NewNote(uid: "\(writer)-\(number)-\($0)", title: "t\(dice.next(40))", rank: Int64(dice.next(100))) }
        }
        switch dice.next(20) {
        case 0..<4 where folders.count < 12, 0..<1:
            return .insertFolder(uid: "\(writer)-\(number)", name: "f\(dice.next(10))", notes: newNotes(1 + dice.next(6)))
        case 4..<7 where !notes.isEmpty:
            let chosen = Set((0..<(1 + dice.next(4))).compactMap { _ in dice.pick(notes) }).sorted()
            return .updateNotes(chosen, titleSuffix: "\(dice.next(10))", rankDelta: Int64(dice.next(21) - 10))
        case 7..<9 where !folders.isEmpty:
            return .deleteFolder(dice.pick(folders)!)
        case 9..<11 where !notes.isEmpty:
            return .moveNote(dice.pick(notes)!, toFolder: dice.next(4) == 0 ? nil : dice.pick(folders))
        case 11..<14 where !notes.isEmpty && !tags.isEmpty:
            let note = dice.pick(notes)!
            let adding = Set((0..<dice.next(3)).compactMap { _ in dice.pick(tags) }).subtracting(state.notes[note]!.tags).sorted()
            let removing = state.notes[note]!.tags.sorted().filter { _ in dice.next(2) == 0 }
            return .retag(note, adding: adding, removing: removing)
        case 14..<15 where tags.count < 8, 11..<14:
            return .insertTag(uid: "\(writer)-\(number)", name: "g\(dice.next(5))")
        case 15..<17:
            return .batchInsert(newNotes(1 + dice.next(8)))
        case 17..<18:
            return .batchUpdate(writer: writer, minimumRank: Int64(dice.next(100)), rankDelta: Int64(dice.next(7)) - 3)
        case 18..<19:
            return .batchDelete(writer: writer, belowRank: Int64(dice.next(25)))
        default:
            return .insertFolder(uid: "\(writer)-\(number)", name: "f\(dice.next(10))", notes: newNotes(1 + dice.next(3)))
        }
    }

    /// The state after `operation`.
    public static func apply(_ operation: Operation, to state: inout State) {
        switch operation {
        case .insertFolder(let uid, let name, let notes):
            state.folders[uid] = name
            for note in notes { state.notes[note.uid] = State.Note(title: note.title, rank: note.rank, folder: uid, tags: []) }
        case .updateNotes(let uids, let suffix, let delta):
            for uid in uids {
                state.notes[uid]!.title += suffix
                state.notes[uid]!.rank += delta
            }
        case .deleteFolder(let uid):
            state.folders[uid] = nil
            state.notes = state.notes.filter { $0.value.folder != uid }
        case .moveNote(let uid, let folder):
            state.notes[uid]!.folder = folder
        case .retag(let uid, let adding, let removing):
            state.notes[uid]!.tags.formUnion(adding)
            state.notes[uid]!.tags.subtract(removing)
        case .insertTag(let uid, let name):
            state.tags[uid] = name
        case .batchInsert(let notes):
            for note in notes { state.notes[note.uid] = State.Note(title: note.title, rank: note.rank, folder: nil, tags: []) }
        case .batchUpdate(_, let minimum, let delta):
            for (uid, note) in state.notes where note.rank >= minimum { state.notes[uid]!.rank += delta }
        case .batchDelete(_, let below):
            state.notes = state.notes.filter { !($0.value.rank < below && $0.value.folder == nil) }
        }
    }

    /// The state after a writer's operations 1 through `count`.
    public static func replay(_ count: Int, writer: String) -> State {
        var state = State()
        for number in stride(from: 1, through: count, by: 1) { apply(operation(number, writer: writer, after: state), to: &state) }
        return state
    }

    // MARK: - Performing and reading them through the public API

    /// Performs `operation` on the store: one context save, or one batch request.
    public static func perform(_ operation: Operation, coordinator: PersistentStoreCoordinator, writer: String) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        func objects(_ entity: String, _ uids: [String]) throws -> [String: ManagedObject] {
            guard !uids.isEmpty else { return [:] }
            let found = try context.fetch(FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "uid IN %@", uids.map { PredicateValue.string($0) })))
            return Dictionary(uniqueKeysWithValues: found.map { ($0.value(forKey: "uid") as! String, $0) })
        }
        func insert(_ entity: String, _ values: [String: Any?]) throws -> ManagedObject {
            let object = try context.insertNewObject(forEntityName: entity)
            for (key, value) in values { try object.setValue(value, forKey: key) }
            try object.setValue(writer, forKey: "writer")
            return object
        }
        switch operation {
        case .insertFolder(let uid, let name, let notes):
            let folder = try insert("Folder", ["uid": uid, "name": name])
            for note in notes { _ = try insert("Note", ["uid": note.uid, "title": note.title, "rank": note.rank, "folder": folder]) }
        case .updateNotes(let uids, let suffix, let delta):
            for note in try objects("Note", uids).values {
                try note.setValue((note.value(forKey: "title") as! String) + suffix, forKey: "title")
                try note.setValue((note.value(forKey: "rank") as! Int64) + delta, forKey: "rank")
            }
        case .deleteFolder(let uid):
            for folder in try objects("Folder", [uid]).values { context.delete(folder) }
        case .moveNote(let uid, let folder):
            let note = try objects("Note", [uid])[uid]!
            try note.setValue(try folder.map { try objects("Folder", [$0])[$0]! }, forKey: "folder")
        case .retag(let uid, let adding, let removing):
            let note = try objects("Note", [uid])[uid]!
            let tags = try objects("Tag", adding + removing)
            var current = Set((note.value(forKey: "tags") as! [ManagedObject]).map(\.objectID))
            current.formUnion(adding.map { tags[$0]!.objectID })
            current.subtract(removing.map { tags[$0]!.objectID })
            try note.setValue(Set(current.map { context.object(with: $0) }), forKey: "tags")
        case .insertTag(let uid, let name):
            _ = try insert("Tag", ["uid": uid, "name": name])
        case .batchInsert(let notes):
            let rows: [[String: BatchValue]] = notes.map {
                ["uid": .attribute(.string($0.uid)), "writer": .attribute(.string(writer)), "title": .attribute(.string($0.title)),
                 "rank": .attribute(.integer($0.rank))]
            }
            _ = try context.execute(BatchInsertRequest(entityName: "Note", objects: rows))
            return
        case .batchUpdate(let writer, let minimum, let delta):
            _ = try context.execute(BatchUpdateRequest(entityName: "Note", predicate: try FetchPredicate(format: "writer == %@ AND rank >= %@", writer, minimum),
                                                       propertiesToUpdate: ["rank": try PredicateExpression(format: "rank + %@", delta)]))
            return
        case .batchDelete(let writer, let below):
            _ = try context.execute(BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Note",
                predicate: try FetchPredicate(format: "writer == %@ AND rank < %@ AND folder == nil", writer, below))))
            return
        }
        try context.save()
    }

    /// A writer's objects as the store holds them, and every disagreement between the two sides of a relationship.
    public static func read(writer: String, coordinator: PersistentStoreCoordinator) throws -> (state: State, problems: [String]) {
        let context = ManagedObjectContext(coordinator: coordinator)
        func all(_ entity: String) throws -> [ManagedObject] {
            try context.fetch(FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "writer == %@", writer)))
        }
        func uid(_ object: ManagedObject) -> String { object.value(forKey: "uid") as? String ?? "?" }
        var state = State(), problems: [String] = []
        let folders = try all("Folder"), notes = try all("Note"), tags = try all("Tag")
        for folder in folders { state.folders[uid(folder)] = folder.value(forKey: "name") as? String }
        for tag in tags { state.tags[uid(tag)] = tag.value(forKey: "name") as? String }
        for note in notes {
            state.notes[uid(note)] = State.Note(title: note.value(forKey: "title") as? String ?? "?", rank: note.value(forKey: "rank") as? Int64 ?? -999,
                                                folder: (note.value(forKey: "folder") as? ManagedObject).map(uid),
                                                tags: Set((note.value(forKey: "tags") as? [ManagedObject] ?? []).map(uid)))
        }
        for folder in folders {
            let held = Set((folder.value(forKey: "notes") as? [ManagedObject] ?? []).map(uid))
            let pointing = Set(state.notes.filter { $0.value.folder == uid(folder) }.keys)
            if held != pointing { problems.append("folder \(uid(folder)) holds \(held.sorted()), notes pointing at it are \(pointing.sorted())") }
        }
        for tag in tags {
            let held = Set((tag.value(forKey: "notes") as? [ManagedObject] ?? []).map(uid))
            let tagged = Set(state.notes.filter { $0.value.tags.contains(uid(tag)) }.keys)
            if held != tagged { problems.append("tag \(uid(tag)) holds \(held.sorted()), notes tagged with it are \(tagged.sorted())") }
        }
        return (state, problems)
    }
}
