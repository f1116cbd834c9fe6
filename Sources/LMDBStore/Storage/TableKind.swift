import LMDB

/// The kinds of tables a store file holds (`Docs/FORMAT.md`, "The file"), each made with the engine options its
/// entries need. The layout gives every table its kind when it names it, so nothing tells tables apart by name.
enum TableKind: Hashable, Sendable {
    /// `meta`: the store's metadata and model.
    case metadata
    /// `seq`: each root entity's key counter, and the change log's.
    case sequences
    /// `changes`: the objects each recent save touched.
    case changeLog
    /// `rows/<Root>`: an entity hierarchy's rows.
    case rows
    /// `index/<Entity>/<index>`: a fetch index.
    case fetchIndex
    /// `unique/<Entity>/<n>`: a uniqueness constraint no index keeps.
    case uniqueness
    /// `toone/<Entity>/<relationship>`: a to-one's inverse.
    case toOneIndex
    /// `members/…` (unordered) or `link/…` (ordered): the members of `owner`'s to-many `relationship`.
    case toMany(owner: String, relationship: String, isOrdered: Bool)

    /// The options the table is made with: fetch indexes, to-one indexes and unordered to-many tables keep their rows
    /// as sorted, fixed-size duplicate values of each key (row key + entity tag — and a covering index's stored
    /// values, each of its type's full width), so the engine counts a key's rows without visiting them, stores the
    /// key once for all of them and hands them out a page at a time.
    var options: DatabaseOptions {
        switch self {
        case .fetchIndex, .toOneIndex, .toMany(_, _, isOrdered: false): [.dupSort, .dupFixed]
        case .metadata, .sequences, .changeLog, .rows, .uniqueness, .toMany: []
        }
    }

    /// Whether the table holds one entry per row for a secondary structure a row's values decide (a fetch index, a
    /// uniqueness constraint, a to-one's inverse): what ``IndexMaintainer``s keep and `verify()` recomputes.
    var holdsRowEntries: Bool {
        switch self {
        case .fetchIndex, .uniqueness, .toOneIndex: true
        default: false
        }
    }
}
