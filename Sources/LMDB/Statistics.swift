internal import CLMDB

/// The shape of a B+tree: an environment's main tree or one database's.
/// The corresponding LMDB type is `MDB_stat`.
public struct Statistics: Sendable, Hashable {
    /// The size of a page in bytes.
    public var pageSize: Int
    /// The depth (height) of the B+tree.
    public var depth: Int
    /// The number of internal (non-leaf) pages.
    public var branchPages: Int
    /// The number of leaf pages.
    public var leafPages: Int
    /// The number of overflow pages (values too large for a leaf page).
    public var overflowPages: Int
    /// The number of key/value pairs.
    public var entries: Int

    /// The number of pages the tree uses.
    public var pages: Int { branchPages + leafPages + overflowPages }

    init(_ stat: MDB_stat) {
        pageSize = Int(stat.ms_psize)
        depth = Int(stat.ms_depth)
        branchPages = stat.ms_branch_pages
        leafPages = stat.ms_leaf_pages
        overflowPages = stat.ms_overflow_pages
        entries = stat.ms_entries
    }
}
