// Package kernel is the gateway's side of stateful runs (DESIGN.md §11):
// one IPython kernel per session, driven over the Jupyter messaging
// protocol, inside the sandbox that runs the session's code.
//
// # Where the protocol client lives
//
// The Jupyter protocol (five ZeroMQ sockets, HMAC-signed multipart
// messages) is spoken inside the sandbox, by a small Python driver
// (driver.py, embedded here and passed to `python3 -c`, so no image
// carries a copy that could drift) that speaks it over Debian's pyzmq to
// a local ipykernel. (It used jupyter_client's KernelManager and client
// until they proved to hold 40 MB of the driver's memory, which every
// pause's checkpoint carried; the image still installs jupyter_client,
// which ipykernel itself needs.) The executor talks to the driver with JSON
// lines over the driver's stdin and stdout: one request per cell, then
// the cell's events (stream, display, error) and a final done. This
// package is the Go end of those JSON lines (Conn); docker holds it on a
// container's attach stream, sandboxd on the driver's pipes.
//
// Why not speak ZeroMQ from the gateway: the kernel's sockets would have
// to leave the sandbox, which has no network interface by design
// (DESIGN.md §9), and the gateway would need a ZeroMQ stack (cgo or a
// partial pure-Go one) for what the driver does in a page of Python
// (signed messages, interrupt by signal to the kernel's process group,
// restarts). Why not a home-made REPL: IPython's display formatting, `_`,
// magics and tracebacks are the ones data-analysis users and their agents
// know.
//
// # Isolation and obligations
//
// The driver and its kernel are ordinary processes of the sandbox: the
// session's uid, no network but the sandbox's own loopback (where the
// kernel's sockets listen, HMAC-keyed), the read-only root and the private
// /tmp, where IPython's and Jupyter's writable state goes (never the
// workspace). The sandbox outlives a cell, so its memory and pids limits
// bound the kernel over its whole life, not one cell; the per-cell
// timeout is an interrupt (KeyboardInterrupt), then, for a cell that
// ignores it, a restart of the kernel by the driver, then, if the driver
// does not answer either, the executor's kill of the whole sandbox.
//
// # Lifecycle
//
// A kernel that dies (os._exit, the memory limit's OOM killer) is
// restarted on the next cell, whose result says so (KernelRestarted). A
// cell whose client goes away is interrupted, not killed. Deleting the
// session removes the sandbox and with it the kernel.
package kernel
