package deploytest

import (
	"bufio"
	"debug/elf"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// TestImageRootfs runs scripts/image-rootfs.sh, the Dockerfile's build
// steps, into a temporary directory, checks that what it built is what
// the Dockerfile declares (user, volume, port, health check, command),
// and runs the image's command on it: as root, chrooted into it as the
// image's user, exactly as the Dockerfile's ENTRYPOINT and CMD say (only
// the listener moved to a free loopback port); otherwise on the host,
// with the data directory moved into the built tree. The Dockerfile's own
// HEALTHCHECK command must pass against it, and SIGTERM must stop it
// cleanly.
func TestImageRootfs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tallyd")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	script := exec.Command("bash", "scripts/image-rootfs.sh", root)
	script.Dir = repoRoot
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("image-rootfs.sh: %v\n%s", err, out)
	}
	df, err := ReadDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	img := readImage(t, df)

	// The binary is static: no interpreter, no shared libraries.
	bin := filepath.Join(root, img.entrypoint[0])
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("ENTRYPOINT %s: %v", img.entrypoint[0], err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not a static binary", img.entrypoint[0])
		}
	}
	if libs, err := ef.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s links shared libraries %v (%v)", img.entrypoint[0], libs, err)
	}
	_ = ef.Close()

	// The user the Dockerfile runs as exists, and owns the volume.
	uid, gid := passwdEntry(t, filepath.Join(root, "etc", "passwd"), "tally")
	if img.uid != uid || img.gid != gid {
		t.Errorf("Dockerfile USER %d:%d, the image's passwd has tally as %d:%d", img.uid, img.gid, uid, gid)
	}
	if img.chownVolume != fmt.Sprintf("%d:%d", uid, gid) {
		t.Errorf("Dockerfile copies %s with --chown=%s, want %d:%d", img.volume, img.chownVolume, uid, gid)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil {
		t.Errorf("no CA bundle in the image: %v", err)
	}

	// The image's config: its data under the volume, its listener on the
	// exposed port, which the health check asks.
	cfgPath := img.configPath(t)
	cfg := tallynode.DefaultConfig()
	if err := cliutil.DecodeHCLFile(filepath.Join(root, cfgPath), &cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.DataDir, img.volume+"/") {
		t.Errorf("data_dir %q is not under the VOLUME %s", cfg.DataDir, img.volume)
	}
	_, listenPort, _ := net.SplitHostPort(cfg.Listen)
	hu, err := url.Parse(img.health[len(img.health)-1])
	if err != nil {
		t.Fatal(err)
	}
	if listenPort != img.expose || hu.Port() != img.expose || (hu.Path != "" && hu.Path != "/healthz") {
		t.Errorf("listen port %s, EXPOSE %s, HEALTHCHECK %s: want one port, and the base URL (or its /healthz)", listenPort, img.expose, hu)
	}
	if img.health[0] != img.entrypoint[0] || img.health[1] != "healthcheck" || img.health[len(img.health)-2] != "--url" {
		t.Errorf("HEALTHCHECK %q: want %s healthcheck ... --url URL", img.health, img.entrypoint[0])
	}

	run := newImageRunner(t, root, uid, gid)
	out, err := run.command(img.entrypoint[0], "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "tallyd ") {
		t.Fatalf("tallyd version: %v: %s", err, out)
	}
	// Built from a checkout, the binary is stamped with its release and
	// commit (scripts/version.sh), as `make build` stamps them.
	vcmd := exec.Command("bash", "scripts/version.sh")
	vcmd.Dir = repoRoot
	if vs, err := vcmd.Output(); err == nil {
		f := strings.Fields(string(vs))
		if want := "tallyd " + f[0] + " (revision " + f[1] + ")"; len(f) != 2 || !strings.HasPrefix(string(out), want) {
			t.Errorf("the image's tallyd version: %q, want %q", out, want)
		}
	}

	// The image's command, listening on a free loopback port.
	argv := append(append([]string{}, img.entrypoint...), img.cmd...)
	argv = append(argv, "--listen", "127.0.0.1:0", "--log-level", "warn")
	if !run.chroot {
		argv = append(argv, "--data", filepath.Join(root, cfg.DataDir))
	}
	srv := run.command(argv[0], argv[1:]...)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() { // owned by the process: ends when its stdout closes
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
		exited <- srv.Wait()
	}()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
		}
	})
	var listen string
	select {
	case listen = <-addr:
	case err := <-exited:
		t.Fatalf("%q exited before listening: %v", argv, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%q did not listen within 60s", argv)
	}

	// The Dockerfile's HEALTHCHECK, against the port it listens on.
	health := append([]string{}, img.health...)
	health[len(health)-1] = "http://" + listen + hu.Path
	testkit.WaitFor(t, 30*time.Second, func() error {
		if out, err := run.command(health[0], health[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%q: %v: %s", health, err, out)
		}
		return nil
	})
	if run.chroot {
		st, err := os.Stat(filepath.Join(root, cfg.DataDir))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid {
			t.Errorf("the data directory belongs to uid %d, want the image's user %d", sys.Uid, uid)
		}
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want a clean exit", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no exit within 60s of SIGTERM")
	}
}

// image is what the Dockerfile's last stage declares.
type image struct {
	uid, gid    int
	volume      string // the one VOLUME
	chownVolume string // the --chown of the COPY into the volume
	expose      string // the one EXPOSEd port
	health      []string
	entrypoint  []string
	cmd         []string
}

func readImage(t *testing.T, df *Dockerfile) image {
	t.Helper()
	var img image
	must := func(kw string) Instruction {
		in, err := df.Last(kw)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	user := must("USER").Args
	u, g, ok := strings.Cut(user, ":")
	var err1, err2 error
	img.uid, err1 = strconv.Atoi(u)
	img.gid, err2 = strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || img.uid == 0 {
		t.Fatalf("Dockerfile USER %q: want a numeric non-root UID:GID (a name needs the image's passwd at run time)", user)
	}
	var vols []string
	if err := jsonArray(must("VOLUME").Args, &vols); err != nil || len(vols) != 1 {
		t.Fatalf("Dockerfile VOLUME %q: want one path in a JSON array (%v)", must("VOLUME").Args, err)
	}
	img.volume = vols[0]
	for _, in := range df.Final("COPY") {
		f := strings.Fields(in.Args)
		if len(f) > 0 && strings.HasPrefix(f[len(f)-1], img.volume) {
			for _, a := range f {
				if c, ok := strings.CutPrefix(a, "--chown="); ok {
					img.chownVolume = c
				}
			}
		}
	}
	img.expose = strings.TrimSuffix(must("EXPOSE").Args, "/tcp")
	var err error
	if img.health, err = ExecForm(must("HEALTHCHECK")); err != nil {
		t.Fatal(err)
	}
	if img.entrypoint, err = ExecForm(must("ENTRYPOINT")); err != nil {
		t.Fatal(err)
	}
	if img.cmd, err = ExecForm(must("CMD")); err != nil {
		t.Fatal(err)
	}
	if len(img.health) < 4 || len(img.entrypoint) != 1 || !path.IsAbs(img.entrypoint[0]) {
		t.Fatalf("HEALTHCHECK %q, ENTRYPOINT %q: want the binary's absolute path", img.health, img.entrypoint)
	}
	return img
}

// configPath is the --config file the image's CMD names.
func (img image) configPath(t *testing.T) string {
	t.Helper()
	for i, a := range img.cmd {
		if (a == "--config" || a == "-config") && i+1 < len(img.cmd) {
			return img.cmd[i+1]
		}
	}
	t.Fatalf("CMD %q names no --config", img.cmd)
	return ""
}

func jsonArray(s string, v *[]string) error {
	argv, err := ExecForm(Instruction{Keyword: "VOLUME", Args: s})
	*v = argv
	return err
}

// passwdEntry is the uid and gid of name in a passwd file.
func passwdEntry(t *testing.T, file, name string) (uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: bad entry %q", file, line)
			}
			return uid, gid
		}
	}
	t.Fatalf("%s: no user %s", file, name)
	return 0, 0
}

// imageRunner runs programs of the built tree: chrooted into it as the
// image's user when this test runs as root, else on the host, with paths
// under the tree.
type imageRunner struct {
	root     string
	uid, gid int
	chroot   bool
}

func newImageRunner(t *testing.T, root string, uid, gid int) *imageRunner {
	r := &imageRunner{root: root, uid: uid, gid: gid, chroot: os.Geteuid() == 0}
	if !r.chroot {
		t.Logf("not root: running the image's tallyd on the host, not chrooted as uid %d", uid)
	}
	return r
}

func (r *imageRunner) command(prog string, args ...string) *exec.Cmd {
	if !r.chroot {
		for i, a := range args {
			if strings.HasPrefix(a, "/etc/tally/") {
				args[i] = filepath.Join(r.root, a)
			}
		}
		cmd := exec.Command(filepath.Join(r.root, prog), args...)
		cmd.Env = []string{}
		return cmd
	}
	cmd := exec.Command(prog, args...)
	cmd.Path = prog // resolved inside the chroot, not on the host's PATH
	cmd.Dir = "/"
	cmd.Env = []string{} // the image sets no environment
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     r.root,
		Credential: &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid), Groups: []uint32{}},
	}
	return cmd
}

// The Dockerfile builds for each target platform on the builder's own
// (a multi-arch build without emulation) and labels the image with the
// OCI annotations a registry and a scanner read: source, revision,
// version and licenses, the last two from the build's arguments.
func TestDockerfileLabelsAndPlatforms(t *testing.T) {
	df, err := ReadDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	for _, in := range df.Instructions {
		if in.Keyword == "FROM" {
			froms = append(froms, in.Args)
		}
	}
	if len(froms) != 2 || froms[1] != "scratch" {
		t.Fatalf("stages FROM %q: want a build stage, then scratch", froms)
	}
	var build []Instruction
	for _, in := range df.Instructions {
		if in.Keyword == "FROM" && build != nil {
			break
		}
		if in.Keyword == "FROM" || build != nil {
			build = append(build, in)
		}
	}
	if !strings.HasPrefix(build[0].Args, "--platform=$BUILDPLATFORM ") {
		t.Errorf("build stage FROM %q: want --platform=$BUILDPLATFORM (cross-compile, no emulation)", build[0].Args)
	}
	var args, runs string
	for _, in := range build {
		switch in.Keyword {
		case "ARG":
			args += " " + in.Args
		case "RUN":
			runs += " " + in.Args
		}
	}
	for _, want := range []string{"TARGETOS", "TARGETARCH", "VERSION", "REVISION"} {
		if !slices.Contains(strings.Fields(args), want) {
			t.Errorf("build stage: no ARG %s", want)
		}
	}
	for _, want := range []string{"GOOS=$TARGETOS", "GOARCH=$TARGETARCH", "TALLY_VERSION=$VERSION", "TALLY_REVISION=$REVISION", "scripts/image-rootfs.sh"} {
		if !strings.Contains(runs, want) {
			t.Errorf("build stage: no RUN with %s", want)
		}
	}
	labels := map[string]string{}
	for _, in := range df.Final("LABEL") {
		for _, kv := range strings.Fields(in.Args) {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
	}
	finalArgs := ""
	for _, in := range df.Final("ARG") {
		finalArgs += " " + in.Args
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/tally-dev/tally",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  "$VERSION",
		"org.opencontainers.image.revision": "$REVISION",
	} {
		if labels[k] != want {
			t.Errorf("LABEL %s=%q, want %q", k, labels[k], want)
		}
		if v, ok := strings.CutPrefix(want, "$"); ok && !slices.Contains(strings.Fields(finalArgs), v) {
			t.Errorf("LABEL %s uses $%s, which the last stage does not declare (ARG %s)", k, v, v)
		}
	}
	lic, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil || !strings.Contains(string(lic), "Apache License") || !strings.Contains(string(lic), "Version 2.0") {
		t.Errorf("LICENSE is not the Apache License 2.0 the label names (%v)", err)
	}
}
