#ifndef CLMDB_SHIM_H
#define CLMDB_SHIM_H

// The only C surface LMDBStore uses. Only the `LMDB` Swift module imports this.
#include <lmdb.h>

#endif
