import Foundation
import ObjectGraph

/// A test kit for store authors: one call runs every check of the incremental store contract against a store
/// type and reports each failure by name.
///
/// It needs no test framework; assert on the report in whichever one you use:
///
/// ```swift
/// let report = StoreConformance.run { coordinator in
///     try coordinator.addPersistentStore(type: MyStore.storeType, at: temporaryURL())
/// }
/// #expect(report.failures.isEmpty, "\(report)")
/// ```
///
/// Each check gets a fresh coordinator over ``model`` (the kit's own model: every attribute type, every
/// relationship kind, inheritance, a uniqueness constraint) and the store(s) your closure adds to it.
public enum StoreConformance {
    /// One check that did not pass.
    public struct Failure: Sendable, CustomStringConvertible {
        /// The check's name.
        public var check: String
        /// What went wrong.
        public var message: String
        /// `check: message`.
        public var description: String { "\(check): \(message)" }
    }

    /// What a run found.
    public struct Report: Sendable, CustomStringConvertible {
        /// The names of the checks that ran, in order.
        public var checks: [String] = []
        /// The checks that failed.
        public var failures: [Failure] = []
        /// Whether every check passed.
        public var passed: Bool { failures.isEmpty }
        /// One line per failure, or a line saying all checks passed.
        public var description: String {
            failures.isEmpty ? "all \(checks.count) conformance checks passed"
                : "\(failures.count) of \(checks.count) conformance checks failed:\n" + failures.map { "- \($0)" }.joined(separator: "\n")
        }
    }

    /// Adds the store under test to a fresh coordinator.
    public typealias StoreSetup = (PersistentStoreCoordinator) throws -> Void

    /// Runs every check (or those whose names are in `only`) and reports the failures.
    public static func run(only: Set<String>? = nil, addStore: StoreSetup) -> Report {
        var report = Report()
        for check in checks where only?.contains(check.name) ?? true {
            report.record(check) {
                let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
                try addStore(coordinator)
                return Harness(coordinator: coordinator)
            }
        }
        return report
    }

    /// The names of every check, in the order they run.
    public static var checkNames: [String] { checks.map(\.name) }

    /// Adds an atomic store under test to a coordinator, at the location given (which the kit makes fresh for
    /// each check and passes again when a check reopens the store).
    public typealias AtomicStoreSetup = (PersistentStoreCoordinator, URL) throws -> Void

    /// Runs every check of ``run(only:addStore:)`` and the atomic-store checks (``atomicStoreCheckNames``: the
    /// store survives a reload with the same object IDs, a missing location becomes a new store, a failed save
    /// leaves the file as it was, removing a never-saved store leaves nothing behind), each at a fresh location
    /// in a temporary folder.
    public static func runAtomicStore(only: Set<String>? = nil, addStore: @escaping AtomicStoreSetup) -> Report {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("StoreConformance-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var counter = 0
        func location() -> URL {
            counter += 1
            return folder.appendingPathComponent("store-\(counter)")
        }
        var report = Report()
        for check in checks + atomicChecks where only?.contains(check.name) ?? true {
            let url = location()
            report.record(check) {
                let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
                try addStore(coordinator, url)
                return Harness(coordinator: coordinator, location: url, reopen: {
                    let fresh = PersistentStoreCoordinator(managedObjectModel: model)
                    try addStore(fresh, url)
                    return fresh
                })
            }
        }
        return report
    }

    /// The names of the atomic-store checks, in the order they run.
    public static var atomicStoreCheckNames: [String] { atomicChecks.map(\.name) }

    struct Check: Sendable {
        let name: String
        let body: @Sendable (Harness) throws -> Void
    }

    struct CheckFailure: Error {
        let message: String
    }

    /// What a check works with.
    struct Harness {
        let coordinator: PersistentStoreCoordinator
        /// The store's location (atomic-store checks only).
        var location: URL?
        /// Adds the store at the same location to a fresh coordinator (atomic-store checks only).
        var reopen: (() throws -> PersistentStoreCoordinator)?

        func context() -> ManagedObjectContext { ManagedObjectContext(coordinator: coordinator) }

        func require(_ condition: Bool, _ message: @autoclosure () -> String) throws {
            if !condition { throw CheckFailure(message: message()) }
        }

        func requireError(_ code: ManagedObjectContextError.Code, _ what: String, _ body: () throws -> Void) throws {
            do {
                try body()
            } catch let error as ManagedObjectContextError where error.code == code {
                return
            } catch {
                throw CheckFailure(message: "\(what): expected a \(code) error, got \(error)")
            }
            throw CheckFailure(message: "\(what): expected a \(code) error, but it succeeded")
        }
    }
}

extension StoreConformance.Report {
    /// Runs one check on the harness `setUp` makes and records its name and any failure.
    mutating func record(_ check: StoreConformance.Check, setUp: () throws -> StoreConformance.Harness) {
        checks.append(check.name)
        do {
            try check.body(try setUp())
        } catch let failure as StoreConformance.CheckFailure {
            failures.append(StoreConformance.Failure(check: check.name, message: failure.message))
        } catch {
            failures.append(StoreConformance.Failure(check: check.name, message: "unexpected error: \(error)"))
        }
    }
}
