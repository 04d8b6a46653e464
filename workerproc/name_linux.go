package workerproc

import (
	"bytes"
	"os"
	"path/filepath"
)

// takeName gives this process, and each of its threads, the name of the
// binary it was started as, when the kernel named them "exe": a supervisor
// starts its workers from its own image, /proc/self/exe (see
// supervisor.ProcessConfig.Path), and the kernel names a process after the
// file it executed, and a thread after the one that started it. ps, top
// and pgrep, and per-thread tools (top -H, perf), then show the worker as
// its server's binary, as before. Threads started from here on (the
// runtime's, a model's) take the name of a thread named already.
func takeName() {
	name := filepath.Base(os.Args[0])
	if name == "exe" || name == "." || name == string(filepath.Separator) {
		return
	}
	if len(name) > 15 { // the kernel keeps 15 bytes
		name = name[:15]
	}
	// Twice: a thread started while the first pass ran was named after
	// one not yet renamed.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, task := range tasks {
			rename(filepath.Join("/proc/self/task", task.Name(), "comm"), name)
		}
	}
}

// rename names the thread whose comm file is comm, if it is named "exe".
func rename(comm, name string) {
	had, err := os.ReadFile(comm)
	if err != nil || !bytes.Equal(bytes.TrimSpace(had), []byte("exe")) {
		return
	}
	f, err := os.OpenFile(comm, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(name)
	_ = f.Close()
}
