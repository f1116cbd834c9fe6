internal import CLMDB

extension Environment {
    /// How a store is laid out on disk.
    public enum Layout: Sendable, Hashable {
        /// The store is one data file at the path, with its lock file beside it at `path + "-lock"`
        /// (`MDB_NOSUBDIR`). This is the default.
        case singleFile
        /// The path is a directory holding `data.mdb` and `lock.mdb`. The directory is created when missing.
        case directory
    }

    /// How much durability a commit buys. Every choice keeps the store consistent after a process crash; the weaker
    /// ones may lose the most recent commits (never half of one) if the operating system crashes or loses power.
    public enum Durability: Sendable, Hashable {
        /// Each commit flushes data and meta pages to disk before it returns. Nothing committed is ever lost.
        case full
        /// Data pages are flushed, the meta page is not (`MDB_NOMETASYNC`): a system crash may undo the last
        /// commit, but the store stays intact.
        case skipMetaSync
        /// No flushing on commit (`MDB_NOSYNC`; with ``Options/usesWriteMap`` also `MDB_MAPASYNC`): the operating
        /// system writes pages when it likes, and a system crash may lose recent commits. Call
        /// ``Environment/sync(force:)`` to flush by hand.
        case noSync
    }

    /// The settings an environment is opened with. The defaults are safe: fully durable, single file, read-write.
    public struct Options: Sendable, Hashable {
        /// The on-disk layout. Default: ``Layout/singleFile``.
        public var layout: Layout = .singleFile
        /// The initial size of the memory map in bytes (rounded up to whole pages by LMDB). The map grows by itself
        /// when a write fills it, so this is a starting point, not a limit; the file grows with the data, not with
        /// the map. Default: 1 GiB.
        public var mapSize: Int = 1 << 30
        /// The largest size the map may grow to. A write that needs more fails with ``LMDBError/mapFull``.
        /// Default: 1 TiB.
        public var maxMapSize: Int = 1 << 40
        /// How many named databases the environment can hold. Default: 64.
        public var maxDatabases: Int = 64
        /// How many read transactions may be open at once across every process using the store — the size of the
        /// lock file's reader table. The first process to open the store (when no other has it open) sets it; the
        /// others use the table as it is. Each process keeps at most 8 finished read transactions for reuse and
        /// gives their slots back after a second of disuse. Default: 510.
        public var maxReaders: Int = 510
        /// Opens the store read-only (`MDB_RDONLY`): no write transaction can begin, nothing is created.
        public var isReadOnly: Bool = false
        /// The durability of a commit. Default: ``Durability/full``.
        public var durability: Durability = .full
        /// Writes go straight into the memory map (`MDB_WRITEMAP`): faster writes, but a stray write through a
        /// pointer into the map can corrupt the store, and the file is sized to the whole map (sparse on Linux).
        /// Default: `false`.
        public var usesWriteMap: Bool = false
        /// Lets the operating system read ahead (turn off with `MDB_NORDAHEAD` for random access to a store much
        /// larger than memory). Default: `true`.
        public var readsAhead: Bool = true
        /// The permission bits for files the environment creates. Default: `0o644`.
        public var fileMode: UInt32 = 0o644

        /// Creates the default options.
        public init() {}

        /// Creates options from the default with the given changes.
        public init(_ configure: (inout Options) -> Void) {
            configure(&self)
        }

        var flags: UInt32 {
            var flags = UInt32(MDB_NOTLS)
            if layout == .singleFile { flags |= UInt32(MDB_NOSUBDIR) }
            if isReadOnly { flags |= UInt32(MDB_RDONLY) }
            if usesWriteMap { flags |= UInt32(MDB_WRITEMAP) }
            if !readsAhead { flags |= UInt32(MDB_NORDAHEAD) }
            switch durability {
            case .full: break
            case .skipMetaSync: flags |= UInt32(MDB_NOMETASYNC)
            case .noSync:
                flags |= UInt32(MDB_NOSYNC)
                if usesWriteMap { flags |= UInt32(MDB_MAPASYNC) }
            }
            return flags
        }
    }
}
