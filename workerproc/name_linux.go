package workerproc

import (
	"bytes"
	"os"
	"path/filepath"
)

// takeName gives this process the name of the binary it was started as,
// when the kernel named it "exe": a supervisor starts its workers from its
// own image, /proc/self/exe (see supervisor.ProcessConfig.Path), and the
// kernel names a process after the file it executed. top and pgrep then
// show the worker as its server's binary, as before.
func takeName() {
	const comm = "/proc/self/comm"
	had, err := os.ReadFile(comm)
	if err != nil || !bytes.Equal(bytes.TrimSpace(had), []byte("exe")) {
		return
	}
	name := filepath.Base(os.Args[0])
	if name == "exe" || name == "." || name == string(filepath.Separator) {
		return
	}
	if len(name) > 15 { // the kernel keeps 15 bytes
		name = name[:15]
	}
	f, err := os.OpenFile(comm, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(name)
	_ = f.Close()
}
