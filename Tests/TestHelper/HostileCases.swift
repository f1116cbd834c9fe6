import Foundation
import LMDB
import LMDBStore
import ObjectGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The catalogue of bad input a hostile trial of the store used (issue 16), one case each, run in a process of its
/// own (`lmdbstore-test-helper hostile <case> <folder>`) so that a trap kills only that process. Each case checks its
/// own outcome — the typed error that names the problem, or the right answer — and says what it saw.
public enum HostileCases {
    /// A case: its name, what it does in a fresh folder, and — for the one case whose documented outcome is to stop
    /// the program — the message the stop must print.
    public struct Case: Sendable {
        public let name: String
        public let stopsWith: String?
        let run: @Sendable (URL) throws -> String
    }

    /// A case's outcome was not the one it expects.
    struct WrongOutcome: Error, CustomStringConvertible {
        let description: String
    }

    public static var names: [String] { all.map(\.name) }

    static func named(_ name: String) -> Case? { (all + [fullDisk]).first { $0.name == name } }

    static let all: [Case] = traps + wrongAnswers + files

    // MARK: - Traps (the process died)

    static let traps: [Case] = [
        Case(name: "predicateNested5000ParenthesesDeep", stopsWith: nil) { _ in
            let text = String(repeating: "(", count: 5000) + "installedSize == 1" + String(repeating: ")", count: 5000)
            return try expectSyntaxError(text, mentioning: "nests more than 100 levels")
        },
        Case(name: "expressionNested5000ParenthesesDeep", stopsWith: nil) { _ in
            let text = String(repeating: "(", count: 5000) + "installedSize" + String(repeating: ")", count: 5000) + " == 1"
            return try expectSyntaxError(text, mentioning: "nests more than 100 levels")
        },
        Case(name: "fiveThousandNOTs", stopsWith: nil) { _ in
            try expectSyntaxError(String(repeating: "NOT ", count: 5000) + "installedSize == 1", mentioning: "nests more than 100 levels")
        },
        Case(name: "arithmeticChainOf5000Terms", stopsWith: nil) { _ in
            try expectSyntaxError("installedSize" + String(repeating: " + 1", count: 5000) + " == 1", mentioning: "nests more than 100 levels")
        },
        Case(name: "indexChainOf5000Subscripts", stopsWith: nil) { _ in
            try expectSyntaxError("{1}" + String(repeating: "[0]", count: 5000) + " == 1", mentioning: "nests more than 100 levels")
        },
        Case(name: "predicateBuiltInCode5000Deep", stopsWith: nil) { folder in
            var predicate = try FetchPredicate(format: "installedSize == 1")
            for _ in 0..<5000 { predicate = .not(predicate) }
            let (context, _) = try packages(in: folder)
            let fetch = try expectError(ManagedObjectContextError.self, mentioning: "nests more than 100 levels") {
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: predicate))
            }
            let evaluate = try expectError(PredicateEvaluationError.self, mentioning: "nests more than 100 levels") {
                _ = try predicate.evaluate(with: ["installedSize": PredicateValue.integer(1)])
            }
            return fetch + "; " + evaluate
        },
        Case(name: "predicateJustWithinTheDepthLimit", stopsWith: nil) { folder in
            let text = String(repeating: "(", count: 95) + "installedSize" + String(repeating: ")", count: 95) + " == 1"
            let predicate = try FetchPredicate(format: text)
            let (context, _) = try packages(in: folder)
            let found = try context.fetch(FetchRequest(entityName: "Package", predicate: predicate))
            try expect(found.count == 1, "95 parentheses are fine and find the one package of size 1, found \(found.count)")
            return "95 levels parse, print (\(predicate.predicateFormat.count) characters) and fetch"
        },
        Case(name: "offsetOneLimitIntMax", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            let request = FetchRequest(entityName: "Package", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]).with {
                $0.fetchOffset = 1
                $0.fetchLimit = .max
            }
            let names = try context.fetch(request).map { $0.value(forKey: "name") as? String }
            try expect(names == ["libc6", "python3"], "every package after the first, got \(names)")
            try expect(try context.count(for: request) == 2, "the count agrees")
            return "offset 1, limit Int.max: \(names)"
        },
        Case(name: "offsetIntMaxLimitTen", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            for sorted in [false, true] {
                let request = FetchRequest(entityName: "Package", sortDescriptors: sorted ? [FetchSortDescriptor(keyPath: "installedSize")] : []).with {
                    $0.fetchOffset = .max
                    $0.fetchLimit = 10
                }
                try expect(try context.fetch(request).isEmpty, "nothing lies past offset Int.max")
                try expect(try context.fetchObjectIDs(request).isEmpty, "nothing lies past offset Int.max")
            }
            return "offset Int.max, limit 10: no objects, sorted or not"
        },
        Case(name: "negativeOffsetOrLimit", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            let offset = try expectError(ManagedObjectContextError.self, mentioning: "fetchOffset is -1") {
                _ = try context.fetch(FetchRequest(entityName: "Package").with { $0.fetchOffset = -1 })
            }
            let limit = try expectError(ManagedObjectContextError.self, mentioning: "fetchLimit is -5") {
                _ = try context.count(for: FetchRequest(entityName: "Package").with { $0.fetchLimit = -5 })
            }
            return offset + "; " + limit
        },
        Case(name: "storeMetadataWithoutUUID", stopsWith: nil) { folder in
            let url = folder.appendingPathComponent("store.lmdb")
            do { _ = try packages(in: folder) }
            let environment = try Environment.open(at: url.path)
            let meta = try environment.openDatabase(named: "meta", create: false)
            try environment.write { _ = try meta.delete(key: Array("uuid".utf8), in: $0) }
            return try expectError(ManagedObjectContextError.self, mentioning: "no valid store UUID") {
                _ = try PersistentStoreCoordinator(managedObjectModel: packageModel)
                    .addPersistentStore(type: LMDBIncrementalStore.storeType, at: url)
            }
        },
        Case(name: "verifyWithAShortIndexKeyAndValue", stopsWith: nil) { folder in
            let url = folder.appendingPathComponent("store.lmdb")
            do { _ = try packages(in: folder) }
            let environment = try Environment.open(at: url.path)
            let index = try environment.openDatabase(named: "index/Package/bySize", options: [.dupSort, .dupFixed], create: false)
            let links = try environment.openDatabase(named: "members/Package/dependsOn", options: [.dupSort, .dupFixed], create: false)
            try environment.write { transaction in
                // The entry of size 1 (the first key) loses its reference for a 2-byte stub; libc6 (row key 1)
                // depends on one member whose value is 1 byte; a key too short to hold a row key appears.
                let first = try index.withCursor(in: transaction) { try $0.first()?.keyBytes }!
                _ = try index.delete(key: first, in: transaction)
                try index.put([7, 7], forKey: first, in: transaction)
                let libc: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1]
                _ = try links.delete(key: libc, in: transaction)
                try links.put([7], forKey: libc, in: transaction)
                try links.put([0, 0, 0, 0, 0, 0, 0, 1, 0, 1], forKey: [5], in: transaction)
            }
            let (coordinator, store) = try open(folder)
            let problems = try store.verify()
            try expect(problems.contains { $0.contains("index/Package/bySize") }, "verify names the damaged index: \(problems)")
            try expect(problems.contains { $0.contains("members/Package/dependsOn") && $0.contains("1-byte value") }, "verify names the short link value: \(problems)")
            try expect(problems.contains { $0.contains("members/Package/dependsOn") && $0.contains("1-byte key") }, "verify names the short link key: \(problems)")
            let context = ManagedObjectContext(coordinator: coordinator)
            let fetch = try expectError(ManagedObjectContextError.self, mentioning: "\"index/Package/bySize\" has a 2-byte value") {
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "installedSize == 1")))
            }
            let libc = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "name == 'libc6'")))[0]
            let traverse = try expectError(ManagedObjectContextError.self, mentioning: "\"members/Package/dependsOn\" has a 1-byte value") {
                _ = try store.newValue(forRelationship: packageModel.relationship(named: "dependsOn", in: "Package")!, forObjectWith: libc.objectID)
            }
            return "verify: \(problems); a fetch: \(fetch); a traversal: \(traverse)"
        },
    ]

    // MARK: - Silent wrong answers

    static let wrongAnswers: [Case] = [
        Case(name: "predicateKeyThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"nmae\"") {
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "nmae == %@", "libc6")))
            }
        },
        Case(name: "percentKKeyThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"instaledSize\"") {
                _ = try context.count(for: FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "%K > 1", "instaledSize")))
            }
        },
        Case(name: "keyPathStepThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "the entity Section does not have") {
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "section.titel == 'libs'")))
            }
        },
        Case(name: "subqueryKeyThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"nmae\"") {
                let predicate = try FetchPredicate(format: "SUBQUERY(dependsOn, $d, $d.nmae == 'libc6').@count > 0")
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: predicate))
            }
        },
        Case(name: "unknownKeyWithUnsavedChanges", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            try context.insertNewObject(forEntityName: "Package").setValue("zlib", forKey: "name")
            return try expectError(ManagedObjectContextError.self, mentioning: "\"nmae\"") {
                _ = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "nmae == 'zlib'")))
            }
        },
        Case(name: "sortKeyThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"instaledSize\"") {
                _ = try context.fetch(FetchRequest(entityName: "Package", sortDescriptors: [FetchSortDescriptor(keyPath: "instaledSize")]))
            }
        },
        Case(name: "sortByAToManyRelationship", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "to-many") {
                _ = try context.fetch(FetchRequest(entityName: "Package", sortDescriptors: [FetchSortDescriptor(keyPath: "dependsOn.name")]))
            }
        },
        Case(name: "prefetchKeyPathThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"sectoin\"") {
                _ = try context.fetch(FetchRequest(entityName: "Package").with { $0.relationshipKeyPathsForPrefetching = ["sectoin"] })
            }
        },
        Case(name: "groupByKeyThatNamesNothing", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            return try expectError(ManagedObjectContextError.self, mentioning: "\"maintaner\"") {
                _ = try context.fetchDictionaries(FetchRequest(entityName: "Package").with {
                    $0.resultType = .dictionary
                    $0.propertiesToFetch = [.keyPath("maintaner"), .aggregate(.count, of: "SELF", as: "n")]
                    $0.propertiesToGroupBy = ["maintaner"]
                })
            }
        },
        Case(name: "dictionaryPropertyThatNamesNothing", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            let request = FetchRequest(entityName: "Package").with {
                $0.resultType = .dictionary
                $0.propertiesToFetch = [.keyPath("name"), .keyPath("instaledSize")]
            }
            let viaContext = try expectError(ManagedObjectContextError.self, mentioning: "\"instaledSize\"") { _ = try context.fetchDictionaries(request) }
            let objects = FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "instaledSize > 0"))
            _ = try expectError(ManagedObjectContextError.self, mentioning: "\"instaledSize\"") { _ = try store.execute(.fetch(objects)) }
            _ = try expectError(ManagedObjectContextError.self, mentioning: "\"instaledSize\"") { _ = try store.executeDictionaryFetch(request) }
            return viaContext
        },
        Case(name: "subscriptSetWithAWrongValueType", stopsWith: "Package.installedSize takes") { folder in
            let (context, _) = try packages(in: folder)
            let package = try context.insertNewObject(forEntityName: "Package")
            package["installedSize"] = "big"
            return "the set went through"
        },
        Case(name: "typedSubscriptSetOutOfRange", stopsWith: "100000 is outside its range -32768...32767") { folder in
            let (context, _) = try packages(in: folder)
            let package = try context.insertNewObject(forEntityName: "Package")
            package[AttributeKey<Int64>("priority")] = 100_000
            return "the set went through"
        },
        Case(name: "nanDateIsRefused", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            let package = try context.insertNewObject(forEntityName: "Package")
            return try expectError(ManagedObjectContextError.self, mentioning: "NaN") {
                try package.setValue(Date(timeIntervalSinceReferenceDate: .nan), forKey: "born")
            }
        },
        Case(name: "comparisonWithANaNDate", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            let nan = Date(timeIntervalSinceReferenceDate: .nan)
            var counts: [String: Int] = [:]
            for op in ["<", "<=", "==", ">", ">="] {
                let request = FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "born \(op) %@", nan))
                let memory = try ManagedObjectContext(coordinator: memoryPackages()).fetch(request).count
                let lmdb = try context.fetch(request).count
                try expect(lmdb == memory, "born \(op) NaN: the LMDB store finds \(lmdb), the evaluator \(memory)")
                counts[op] = lmdb
            }
            try expect(counts["<"] == 0 && counts["=="] == 0, "no date is below or equal to NaN: \(counts)")
            return "born op NaN agrees with the evaluator: \(counts.sorted { $0.key < $1.key })"
        },
        Case(name: "nanDecimalSentToTheStoreDirectly", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            let id = try store.obtainPermanentIDs(for: [ObjectReference(objectID: context.insertNewObject(forEntityName: "Package").objectID, entityName: "Package")])[0]
            let change = ObjectChange(objectID: id, attributes: ["name": .string("nan"), "installedSize": .integer(1), "price": .decimal(.nan)])
            let refused = try expectError(ManagedObjectContextError.self, mentioning: "NaN") {
                _ = try store.execute(.save(SaveChangesRequest(insertedObjects: [change])))
            }
            let fresh = ManagedObjectContext(coordinator: context.persistentStoreCoordinator)
            try expect(try fresh.fetch(FetchRequest(entityName: "Package")).count == 3, "nothing was written")
            try expect(try store.verify().isEmpty, "the store is sound")
            return refused
        },
        Case(name: "subEntityURIWithAParentRowsKey", stopsWith: nil) { folder in
            let (context, _) = try packages(in: folder)
            let libc = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "name == 'libc6'")))[0]
            let forged = URL(string: libc.objectID.uriRepresentation.absoluteString.replacingOccurrences(of: "/Package/", with: "/EssentialPackage/"))!
            let id = try context.persistentStoreCoordinator.managedObjectID(forURIRepresentation: forged)
            return try expectError(ManagedObjectContextError.self, mentioning: "is a Package") {
                _ = try ManagedObjectContext(coordinator: context.persistentStoreCoordinator).existingObject(with: id)
            }
        },
        Case(name: "relationshipToAnObjectThatDoesNotExist", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            let section = try context.fetch(FetchRequest(entityName: "Section"))[0]
            let missing = try context.persistentStoreCoordinator.managedObjectID(
                forURIRepresentation: URL(string: section.objectID.uriRepresentation.absoluteString.replacingOccurrences(of: "/p1", with: "/p99"))!)
            let package = try context.insertNewObject(forEntityName: "Package")
            try package.setValue("orphan", forKey: "name")
            try package.setValue(context.object(with: missing), forKey: "section")
            // The section's to-many change is recorded without loading it; the store finds the section missing.
            let viaContext = try expectError(ManagedObjectContextError.self, mentioning: "points at \(missing), which is not in the store") {
                try context.save()
            }
            try expect(!viaContext.contains("a value is required"), "the message names the missing object, not its attributes: \(viaContext)")
            context.rollback()
            // Straight to the store: a to-one and a to-many member that lead nowhere.
            let id = try store.obtainPermanentIDs(for: [ObjectReference(objectID: package.objectID, entityName: "Package")])[0]
            let toOne = try expectError(ManagedObjectContextError.self, mentioning: "which is not in the store") {
                _ = try store.execute(.save(SaveChangesRequest(insertedObjects: [ObjectChange(
                    objectID: id, attributes: ["name": .string("orphan"), "installedSize": .integer(1)], toOne: ["section": missing])])))
            }
            let member = missing.uriRepresentation.absoluteString.replacingOccurrences(of: "/Section/", with: "/Package/")
            let toMany = try expectError(ManagedObjectContextError.self, mentioning: "which is not in the store") {
                _ = try store.execute(.save(SaveChangesRequest(insertedObjects: [ObjectChange(
                    objectID: id, attributes: ["name": .string("orphan"), "installedSize": .integer(1)],
                    toMany: ["dependsOn": [try context.persistentStoreCoordinator.managedObjectID(forURIRepresentation: URL(string: member)!)]])])))
            }
            try expect(try store.verify().isEmpty, "nothing dangling was written")
            return viaContext + " | " + toOne + " | " + toMany
        },
        Case(name: "relationshipToAnObjectOfAnotherEntity", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            let packages = try context.fetch(FetchRequest(entityName: "Package", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
            var change = ObjectChange(objectID: packages[0].objectID, attributes: ["name": .string("apt"), "installedSize": .integer(3)],
                                      toOne: ["section": packages[1].objectID], expectedVersion: 1)
            change.toMany = [:]
            let refused = try expectError(ManagedObjectContextError.self, mentioning: "holds Section objects") {
                _ = try store.execute(.save(SaveChangesRequest(updatedObjects: [change])))
            }
            try expect(try store.verify().isEmpty, "nothing was written")
            return refused
        },
        Case(name: "referenceToAnObjectTheSameSaveDeletes", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            let section = try context.fetch(FetchRequest(entityName: "Section"))[0]
            let id = try store.obtainPermanentIDs(for: [ObjectReference(objectID: context.insertNewObject(forEntityName: "Package").objectID, entityName: "Package")])[0]
            let refused = try expectError(ManagedObjectContextError.self, mentioning: "the same save deletes it") {
                _ = try store.execute(.save(SaveChangesRequest(
                    insertedObjects: [ObjectChange(objectID: id, attributes: ["name": .string("new"), "installedSize": .integer(9)], toOne: ["section": section.objectID])],
                    deletedObjects: [ObjectChange(objectID: section.objectID, expectedVersion: 1)])))
            }
            try expect(try store.verify().isEmpty, "nothing was written")
            return refused
        },
    ]

    // MARK: - Files and the operating system

    static let files: [Case] = [
        Case(name: "lmdbFileOfAnotherProgram", stopsWith: nil) { folder in
            let url = folder.appendingPathComponent("other.lmdb")
            do {
                let environment = try Environment.open(at: url.path)
                let users = try environment.openDatabase(named: "users")
                try environment.write { try users.put(Array("ada".utf8), forKey: Array("u1".utf8), in: $0) }
            }
            let refused = try expectError(ManagedObjectContextError.self, mentioning: "another program") {
                _ = try PersistentStoreCoordinator(managedObjectModel: packageModel).addPersistentStore(type: LMDBIncrementalStore.storeType, at: url)
            }
            let environment = try Environment.open(at: url.path)
            try expect((try? environment.openDatabase(named: "meta", create: false)) == nil, "the foreign file was not written into")
            _ = try PersistentStoreCoordinator(managedObjectModel: packageModel)
                .addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: ["createInForeignFile": "true"])
            let users = try environment.openDatabase(named: "users", create: false)
            try expect(try environment.read { try users.value(forKey: Array("u1".utf8), in: $0) } == Array("ada".utf8), "its data is intact")
            return refused
        },
        Case(name: "mapSizeBeyondTheAddressSpace", stopsWith: nil) { folder in
            var limit = rlimit(rlim_cur: 8 << 30, rlim_max: 8 << 30)
            #if os(Linux)
            guard setrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit) == 0 else { throw WrongOutcome(description: "cannot limit the address space") }
            #else
            guard setrlimit(RLIMIT_AS, &limit) == 0 else { throw WrongOutcome(description: "cannot limit the address space") }
            #endif
            return try expectError(ManagedObjectContextError.self, mentioning: "does not fit in this process's address space") {
                _ = try PersistentStoreCoordinator(managedObjectModel: packageModel).addPersistentStore(
                    type: LMDBIncrementalStore.storeType, at: folder.appendingPathComponent("store.lmdb"), options: ["mapSize": String(16 << 30)])
            }
        },
        Case(name: "saveThatPassesTheFileSizeLimit", stopsWith: nil) { folder in
            let (context, store) = try packages(in: folder)
            signal(SIGXFSZ, SIG_IGN)
            let size = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("store.lmdb").path)[.size] as! Int
            var limit = rlimit()
            #if os(Linux)
            let resource = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
            #else
            let resource = RLIMIT_FSIZE
            #endif
            getrlimit(resource, &limit)
            let saved = limit
            limit.rlim_cur = rlim_t(size + 8192)
            setrlimit(resource, &limit)
            for n in 0..<2000 {
                let package = try context.insertNewObject(forEntityName: "Package")
                try package.setValue("bulk-\(n)-" + String(repeating: "x", count: 200), forKey: "name")
            }
            let refused = try expectError(ManagedObjectContextError.self, mentioning: "file size limit") { try context.save() }
            limit = saved
            setrlimit(resource, &limit)
            try context.save()
            try expect(try store.verify().isEmpty, "the store is sound after the refused commit")
            try expect(try ManagedObjectContext(coordinator: context.persistentStoreCoordinator).count(for: FetchRequest(entityName: "Package")) == 2003,
                       "with room again, the same save goes through whole")
            return refused
        },
        permissionCase("readOnlyLockFile", folder: 0o755, dataFile: 0o666, lockFile: 0o444, "may not write the lock file"),
        permissionCase("readOnlyFolderWithoutALockFile", folder: 0o555, dataFile: 0o666, lockFile: nil,
                       "is not writable, so LMDB cannot create the lock file"),
        permissionCase("readOnlyDataFile", folder: 0o777, dataFile: 0o444, lockFile: 0o666, "may not read and write the data file"),
    ]

    /// Opening a store whose files have these permissions (`nil`: no lock file), as a user other than their owner
    /// (`nobody`, when the helper runs as root): the error must name the file to blame.
    static func permissionCase(_ name: String, folder folderMode: mode_t, dataFile: mode_t, lockFile: mode_t?, _ expected: String) -> Case {
        Case(name: name, stopsWith: nil) { folder in
            let url = folder.appendingPathComponent("store.lmdb")
            do { _ = try packages(in: folder) }
            chmod(url.path, dataFile)
            if let lockFile { chmod(url.path + "-lock", lockFile) } else { unlink(url.path + "-lock") }
            chmod(folder.path, folderMode)
            defer { chmod(folder.path, 0o755) }
            try dropPrivileges()
            return try expectError(ManagedObjectContextError.self, mentioning: expected) {
                _ = try PersistentStoreCoordinator(managedObjectModel: packageModel).addPersistentStore(type: LMDBIncrementalStore.storeType, at: url)
            }
        }
    }

    /// A save on a disk that fills up: a 1 MiB tmpfs mounted in the folder (Linux, as root; see ``canMountSmallDisks``).
    public static let fullDisk = Case(name: "saveOnAFullDisk", stopsWith: nil) { folder in
        #if os(Linux)
        let disk = folder.appendingPathComponent("disk")
        try FileManager.default.createDirectory(at: disk, withIntermediateDirectories: true)
        guard mount("tmpfs", disk.path, "tmpfs", 0, "size=1m") == 0 else { throw WrongOutcome(description: "cannot mount a tmpfs: errno \(errno)") }
        defer { umount2(disk.path, Int32(MNT_DETACH)) }
        let (context, store) = try packages(in: disk)
        var saved = 3
        let refused = try expectError(ManagedObjectContextError.self, mentioning: "is full") {
            for batch in 0..<1000 {
                for n in 0..<100 {
                    let package = try context.insertNewObject(forEntityName: "Package")
                    try package.setValue("fill-\(batch)-\(n)-" + String(repeating: "x", count: 300), forKey: "name")
                }
                try context.save()
                saved += 100
            }
        }
        try expect(try store.verify().isEmpty, "the store is sound after the refused commit")
        let count = try ManagedObjectContext(coordinator: context.persistentStoreCoordinator).count(for: FetchRequest(entityName: "Package"))
        try expect(count == saved, "every acknowledged save is there and nothing of the refused one: \(count) packages, \(saved) saved")
        return refused
        #else
        throw WrongOutcome(description: "tmpfs mounts are Linux's")
        #endif
    }

    /// Whether this process may mount a small tmpfs (root on Linux, in a sandbox that allows it), for
    /// ``fullDisk``.
    public static var canMountSmallDisks: Bool {
        #if os(Linux)
        guard getuid() == 0 else { return false }
        let probe = NSTemporaryDirectory() + "/lmdbstore-mount-probe-\(getpid())"
        guard mkdir(probe, 0o700) == 0 else { return false }
        defer { rmdir(probe) }
        guard mount("tmpfs", probe, "tmpfs", 0, "size=64k") == 0 else { return false }
        umount2(probe, Int32(MNT_DETACH))
        return true
        #else
        return false
        #endif
    }

    // MARK: - Running a case

    /// Runs the named case, prints "ok: …" and exits 0, or prints "wrong: …" and exits 1.
    static func run(_ name: String, folder: URL) -> Never {
        guard let hostile = named(name) else { fail("no hostile case named \(name)") }
        LMDBIncrementalStore.register()
        do {
            say("ok: " + (try hostile.run(folder)))
            exit(0)
        } catch {
            say("wrong: \(error)")
            exit(1)
        }
    }

    // MARK: - Checks

    static func expect(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        if !condition { throw WrongOutcome(description: message()) }
    }

    /// Runs `body` and returns the description of the `E` it throws, which must mention `fragment`.
    static func expectError<E: Error>(_ expected: E.Type, mentioning fragment: String, _ body: () throws -> Void) throws -> String {
        do {
            try body()
        } catch let error as E {
            let text = "\(error)"
            try expect(text.contains(fragment), "the error does not mention \"\(fragment)\": \(text)")
            return text
        } catch {
            throw WrongOutcome(description: "expected a \(E.self), got \(type(of: error)): \(error)")
        }
        throw WrongOutcome(description: "expected a \(E.self) mentioning \"\(fragment)\", but nothing was thrown")
    }

    static func expectSyntaxError(_ text: String, mentioning fragment: String) throws -> String {
        try expectError(PredicateSyntaxError.self, mentioning: fragment) { _ = try FetchPredicate(format: text) }
    }

    /// Runs the rest of the case as the unprivileged user `nobody` when the helper runs as root (permissions do
    /// not stop root).
    static func dropPrivileges() throws {
        guard getuid() == 0 else { return }
        guard setgid(65534) == 0, setuid(65534) == 0 else { throw WrongOutcome(description: "cannot become nobody: errno \(errno)") }
    }

    // MARK: - The store the cases use

    /// Debian's package index in miniature: packages with an indexed unique name, a size, a maintainer, a
    /// to-one section and a many-to-many of dependencies; a sub-entity for the URI case.
    static let packageModel: ManagedObjectModel = try! ManagedObjectModel {
        EntityDescription("Package") {
            AttributeDescription("name", .string)
            AttributeDescription("installedSize", .integer64, defaultValue: 0)
            AttributeDescription("priority", .integer16, isOptional: true)
            AttributeDescription("maintainer", .string, isOptional: true)
            AttributeDescription("born", .date, isOptional: true)
            AttributeDescription("price", .decimal, isOptional: true)
            RelationshipDescription("section", destination: "Section", inverse: "packages", isOptional: true)
            RelationshipDescription("dependsOn", destination: "Package", inverse: "requiredBy", toMany: true)
            RelationshipDescription("requiredBy", destination: "Package", inverse: "dependsOn", toMany: true)
            FetchIndexDescription("bySize", elements: [.ascending("installedSize")])
            FetchIndexDescription("byBorn", elements: [.ascending("born")])
            UniquenessConstraint("name")
        }
        EntityDescription("EssentialPackage", parent: "Package") {
            AttributeDescription("reason", .string, isOptional: true)
        }
        EntityDescription("Section") {
            AttributeDescription("name", .string)
            RelationshipDescription("packages", destination: "Package", inverse: "section", toMany: true)
        }
    }

    /// Three packages in one section (sizes 1, 2, 3; born a day apart; libc6 a dependency of the other two).
    static func fill(_ context: ManagedObjectContext) throws {
        let section = try context.insertNewObject(forEntityName: "Section")
        try section.setValue("libs", forKey: "name")
        var made: [ManagedObject] = []
        for (n, name) in ["libc6", "python3", "apt"].enumerated() {
            let package = try context.insertNewObject(forEntityName: "Package")
            try package.setValue(name, forKey: "name")
            try package.setValue(Int64(n + 1), forKey: "installedSize")
            try package.setValue("team-\(n % 2)", forKey: "maintainer")
            try package.setValue(Date(timeIntervalSinceReferenceDate: Double(n) * 86_400), forKey: "born")
            try package.setValue(section, forKey: "section")
            if let libc = made.first { try package.setValue([libc], forKey: "dependsOn") }
            made.append(package)
        }
        try context.save()
    }

    static func open(_ folder: URL) throws -> (PersistentStoreCoordinator, LMDBIncrementalStore) {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: packageModel)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.appendingPathComponent("store.lmdb"))
        return (coordinator, store as! LMDBIncrementalStore)
    }

    /// A filled LMDB store in `folder` and a context over it.
    static func packages(in folder: URL) throws -> (ManagedObjectContext, LMDBIncrementalStore) {
        let (coordinator, store) = try open(folder)
        let context = ManagedObjectContext(coordinator: coordinator)
        try fill(context)
        return (context, store)
    }

    /// The same packages in an in-memory store: the evaluator's answers.
    static func memoryPackages() throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: packageModel)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        try fill(ManagedObjectContext(coordinator: coordinator))
        return coordinator
    }
}
