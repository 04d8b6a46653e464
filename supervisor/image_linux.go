package supervisor

import "os"

// selfImage names the image this program runs, whatever became of its
// file since: a binary replaced on disk (a package upgrade) is another
// build, which a worker of this server must not be.
const selfImage = "/proc/self/exe"

// ownImage is what a worker of this program is started from, and the name
// it goes by (its argv[0], and the path messages give): this very image,
// under the path this program was started from. Without /proc mounted,
// the binary at that path.
func ownImage() (path, shown string, err error) {
	shown, err = os.Executable()
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(selfImage); err != nil {
		return shown, shown, nil
	}
	return selfImage, shown, nil
}
