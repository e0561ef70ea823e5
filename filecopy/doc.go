// Package filecopy copies files and directory trees to an endpoint in
// another region (mrgw host cp), as RDMA would: the receiver maps each
// destination file and registers the mapping as host memory, and the
// sender WRITEs the file's chunks straight into it at their offsets, in
// whatever order they arrive. There is no reorder buffer and no staging
// copy on the receiving side.
//
// Control travels over a stream (package stream): the manifest (paths,
// sizes, modes, modification times), what the receiver holds already,
// which windows of a file are mapped under which memory key, each chunk's
// CRC32C once its WRITE completed end to end, each file's SHA-256, the
// results. Small files travel inside the stream.
//
// A large file is received into a temporary file beside its destination,
// mapped a window at a time (Window bytes, at most MaxWindows at once per
// copy), so memory and address space stay bounded whatever the file's
// size. The receiver checks each chunk's CRC32C by reading it through the
// mapping after its WRITE completed, and records the verified chunks in
// a small state file beside the temporary one: a copy interrupted by the
// death of either host or of a gateway, run again, sends only the chunks
// not yet verified. The whole file's SHA-256 is computed at both ends and
// compared before the temporary file is synced, given the source's mode
// and modification time, and renamed into place. Holes of sparse files
// (SEEK_DATA, SEEK_HOLE) are not sent and stay holes.
//
// The receiver refuses any path that would leave its root: absolute
// paths, "..", and symbolic links (it resolves every path through an
// os.Root and writes only into real directories).
//
// Wire format, resume rules and the receiver in production:
// docs/ARCHITECTURE.md ("Copying files") and docs/OPERATIONS.md
// ("Copying files between regions").
package filecopy
