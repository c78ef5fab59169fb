package deploytest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Command is one tallyd command line of a deployment file, with what the
// deployment gives the process.
type Command struct {
	// Source says where it is: a file and the service, unit or container.
	Source string
	// Args are tallyd's arguments, the command's name first.
	Args []string
	// Files are the files the process sees at these absolute paths that
	// the deployment files define (configs), by content.
	Files map[string][]byte
	// Env are the names of the environment variables the deployment sets
	// or documents for the process.
	Env []string
	// Volumes are the writable, persistent paths the process gets.
	Volumes []string
	// Ports are the container ports the deployment publishes or names;
	// nil where it does not say (systemd).
	Ports []int
}

// Commands reads every tallyd command line under repo: the Dockerfile's
// CMD and HEALTHCHECK, deploy/compose/compose.yaml's services that run
// the image, deploy/systemd/*.service's ExecStart, and the containers of
// deploy/k8s/*.yaml that run the image.
func Commands(repo string) ([]Command, error) {
	var out []Command
	for _, read := range []func(string) ([]Command, error){dockerCommands, composeCommands, systemdCommands, k8sCommands} {
		cs, err := read(repo)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// imageBinary is where the image holds tallyd (the Dockerfile's
// ENTRYPOINT, the systemd unit's ExecStart).
const imageBinary = "/usr/local/bin/tallyd"

// secretsDocumented are the secrets every deployment documents for
// tallyd serve (configs/*.hcl's header): its NATS password and tokens.
var secretsDocumented = []string{"TALLY_NATS_PASSWORD", "TALLY_WRITE_TOKEN", "TALLY_ADMIN_TOKEN"}

// dockerCommands: the image's CMD (after its ENTRYPOINT) and HEALTHCHECK.
// The image's files are what scripts/image-rootfs.sh installs into it;
// its environment is what the Dockerfile's `docker run -e` example sets.
func dockerCommands(repo string) ([]Command, error) {
	df, err := ReadDockerfile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	files, err := imageFiles(repo)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(df.Path)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	var env []string
	for _, m := range regexp.MustCompile(`-e ([A-Z_]+)=`).FindAllStringSubmatch(string(raw), -1) {
		env = append(env, m[1])
	}
	base := Command{Files: files, Env: env}
	if vol, err := df.Last("VOLUME"); err == nil {
		var v []string
		if err := jsonInto(vol, &v); err != nil {
			return nil, err
		}
		base.Volumes = v
	}
	for _, in := range df.Final("EXPOSE") {
		p, err := strconv.Atoi(strings.TrimSuffix(in.Args, "/tcp"))
		if err != nil {
			return nil, fmt.Errorf("deploytest: Dockerfile:%d: EXPOSE %q", in.Line, in.Args)
		}
		base.Ports = append(base.Ports, p)
	}
	var out []Command
	for _, kw := range []string{"ENTRYPOINT", "CMD", "HEALTHCHECK"} {
		in, err := df.Last(kw)
		if err != nil {
			return nil, err
		}
		argv, err := ExecForm(in)
		if err != nil {
			return nil, err
		}
		switch kw {
		case "ENTRYPOINT":
			if !slices.Equal(argv, []string{imageBinary}) {
				return nil, fmt.Errorf("deploytest: Dockerfile:%d: ENTRYPOINT %q, want [%q]", in.Line, argv, imageBinary)
			}
			continue
		case "HEALTHCHECK":
			if len(argv) == 0 || argv[0] != imageBinary {
				return nil, fmt.Errorf("deploytest: Dockerfile:%d: HEALTHCHECK %q does not run %s", in.Line, argv, imageBinary)
			}
			argv = argv[1:]
		}
		c := base
		c.Source, c.Args = fmt.Sprintf("Dockerfile:%d %s", in.Line, kw), argv
		out = append(out, c)
	}
	return out, nil
}

func jsonInto(in Instruction, v *[]string) error {
	argv, err := ExecForm(Instruction{Keyword: in.Keyword, Args: in.Args, Line: in.Line})
	*v = argv
	return err
}

// imageFiles are the files scripts/image-rootfs.sh installs from the
// repository into the image, by their path in it.
func imageFiles(repo string) (map[string][]byte, error) {
	script, err := os.ReadFile(filepath.Join(repo, "scripts", "image-rootfs.sh"))
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	files := map[string][]byte{}
	re := regexp.MustCompile(`(?m)^install -m [0-7]+ ([a-z][^ "$]+) "\$root(/[^"]+)"$`)
	for _, m := range re.FindAllStringSubmatch(string(script), -1) {
		b, err := os.ReadFile(filepath.Join(repo, m[1]))
		if err != nil {
			return nil, fmt.Errorf("deploytest: image-rootfs.sh installs %s: %w", m[1], err)
		}
		files[m[2]] = b
	}
	if len(files) == 0 {
		return nil, errors.New("deploytest: scripts/image-rootfs.sh installs no file from the repository")
	}
	return files, nil
}

// composeCommands: every service of deploy/compose/compose.yaml built
// from the repository's Dockerfile. Its files are the single files it
// bind-mounts from the repository; its volumes the named volumes.
func composeCommands(repo string) ([]Command, error) {
	dir := filepath.Join(repo, "deploy", "compose")
	file := filepath.Join(dir, "compose.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	var doc struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("deploytest: %s: %w", file, err)
	}
	var out []Command
	for _, name := range sortedKeys(doc.Services) {
		s := doc.Services[name]
		if s.Build == nil {
			continue // not the tally image
		}
		if len(s.Entrypoint) > 0 || len(s.Command) == 0 {
			return nil, fmt.Errorf("deploytest: %s: service %s: want a command and the image's entrypoint", file, name)
		}
		c := Command{Source: "deploy/compose/compose.yaml service " + name, Args: s.Command, Files: map[string][]byte{}}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				return nil, fmt.Errorf("deploytest: %s: service %s: volume %q", file, name, v)
			}
			src, dst := parts[0], parts[1]
			readOnly := len(parts) > 2 && parts[2] == "ro"
			switch {
			case strings.HasPrefix(src, "."):
				b, err := os.ReadFile(filepath.Join(dir, src))
				if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(src, "./secrets/") {
					b = nil // made by setup.sh; the process sees a file there
				} else if err != nil {
					return nil, fmt.Errorf("deploytest: %s: service %s: %w", file, name, err)
				}
				c.Files[dst] = b
			case !readOnly:
				c.Volumes = append(c.Volumes, dst)
			}
		}
		c.Env = sortedKeys(s.Environment)
		for _, p := range s.Ports {
			f := strings.Split(p, ":")
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return nil, fmt.Errorf("deploytest: %s: service %s: port %q", file, name, p)
			}
			c.Ports = append(c.Ports, n)
		}
		out = append(out, c)
	}
	return out, nil
}

// systemdCommands: ExecStart= of every unit in deploy/systemd. The unit's
// files are those its install comment copies from the repository
// ("install ... configs/x.hcl /etc/tally/y.hcl"); its environment the
// TALLY_ variables its comments name; its volume its StateDirectory.
func systemdCommands(repo string) ([]Command, error) {
	units, _ := filepath.Glob(filepath.Join(repo, "deploy", "systemd", "*.service"))
	if len(units) == 0 {
		return nil, errors.New("deploytest: no deploy/systemd/*.service")
	}
	var out []Command
	for _, f := range units {
		u, err := ReadUnit(f)
		if err != nil {
			return nil, err
		}
		c := Command{Source: "deploy/systemd/" + filepath.Base(f) + " ExecStart", Files: map[string][]byte{}}
		starts := u.Values("Service", "ExecStart")
		if len(starts) != 1 {
			return nil, fmt.Errorf("deploytest: %s: %d ExecStart lines, want 1", f, len(starts))
		}
		if strings.ContainsAny(starts[0], `"'\$%`) {
			return nil, fmt.Errorf("deploytest: %s: ExecStart %q: quoting, variables and specifiers are not read here", f, starts[0])
		}
		argv := strings.Fields(starts[0])
		if len(argv) == 0 || argv[0] != imageBinary {
			return nil, fmt.Errorf("deploytest: %s: ExecStart %q does not run %s", f, starts[0], imageBinary)
		}
		c.Args = argv[1:]
		for _, sd := range u.Values("Service", "StateDirectory") {
			for _, d := range strings.Fields(sd) {
				c.Volumes = append(c.Volumes, "/var/lib/"+d)
			}
		}
		re := regexp.MustCompile(`^#\s+install .* ([a-z][^ ]*\.hcl) (/\S+)`)
		for _, line := range u.Comments {
			if m := re.FindStringSubmatch(line); m != nil {
				b, err := os.ReadFile(filepath.Join(repo, m[1]))
				if err != nil {
					return nil, fmt.Errorf("deploytest: %s: %w", f, err)
				}
				c.Files[m[2]] = b
			}
			c.Env = append(c.Env, regexp.MustCompile(`TALLY_[A-Z_]+`).FindAllString(line, -1)...)
		}
		out = append(out, c)
	}
	return out, nil
}

// Unit is a parsed systemd unit file.
type Unit struct {
	Path string
	// Sections maps a section to its keys, each with its values in order.
	Sections map[string]map[string][]string
	Comments []string
}

// Values are the values of key in section, in order.
func (u *Unit) Values(section, key string) []string { return u.Sections[section][key] }

// ReadUnit parses a systemd unit file (no line continuations).
func ReadUnit(file string) (*Unit, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	defer f.Close()
	u := &Unit{Path: file, Sections: map[string]map[string][]string{}}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			u.Comments = append(u.Comments, line)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u.Sections[section] = map[string][]string{}
		case strings.HasSuffix(line, `\`):
			return nil, fmt.Errorf("deploytest: %s:%d: line continuations are not read here", file, n)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("deploytest: %s:%d: %q", file, n, line)
			}
			k = strings.TrimSpace(k)
			u.Sections[section][k] = append(u.Sections[section][k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("deploytest: %s: %w", file, err)
	}
	return u, nil
}

// k8sObject is what k8sCommands reads of a Kubernetes object.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type podSpec struct {
	Containers []struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Ports   []struct {
			ContainerPort int `yaml:"containerPort"`
		} `yaml:"ports"`
		EnvFrom []struct {
			SecretRef *struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct {
			Name string `yaml:"name"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

// ReadK8s reads every object of a multi-document YAML file.
func ReadK8s(file string) ([]k8sObject, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	defer f.Close()
	var objs []k8sObject
	dec := yaml.NewDecoder(f)
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("deploytest: %s: %w", file, err)
		}
		objs = append(objs, o)
	}
}

// k8sCommands: the containers of deploy/k8s/*.yaml that run the tally
// image (its entrypoint, so args only). Their files are the keys of the
// ConfigMaps they mount; their environment the secrets they take whole
// (envFrom: the documented ones) and their env entries; their volumes the
// StatefulSet's claims.
func k8sCommands(repo string) ([]Command, error) {
	files, _ := filepath.Glob(filepath.Join(repo, "deploy", "k8s", "*.yaml"))
	var out []Command
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		objs, err := ReadK8s(file)
		if err != nil {
			return nil, err
		}
		configMaps := map[string]map[string]string{}
		for _, o := range objs {
			if o.Kind == "ConfigMap" {
				configMaps[o.Metadata.Name] = o.Data
			}
		}
		for _, o := range objs {
			if o.Kind != "StatefulSet" && o.Kind != "Deployment" {
				continue
			}
			pod := o.Spec.Template.Spec
			claims := map[string]bool{}
			for _, vc := range o.Spec.VolumeClaimTemplates {
				claims[vc.Metadata.Name] = true
			}
			for _, ct := range pod.Containers {
				if !strings.HasPrefix(ct.Image, "tally:") {
					continue
				}
				if len(ct.Command) > 0 {
					return nil, fmt.Errorf("deploytest: %s: %s %s: want the image's entrypoint, no command", file, o.Kind, o.Metadata.Name)
				}
				c := Command{
					Source: fmt.Sprintf("deploy/k8s/%s %s %s/%s container %s", filepath.Base(file), o.Kind, o.Metadata.Namespace, o.Metadata.Name, ct.Name),
					Args:   ct.Args, Files: map[string][]byte{}, Ports: []int{},
				}
				for _, p := range ct.Ports {
					c.Ports = append(c.Ports, p.ContainerPort)
				}
				for _, e := range ct.EnvFrom {
					if e.SecretRef != nil {
						c.Env = append(c.Env, secretsDocumented...)
					}
				}
				for _, e := range ct.Env {
					c.Env = append(c.Env, e.Name)
				}
				for _, m := range ct.VolumeMounts {
					if claims[m.Name] {
						c.Volumes = append(c.Volumes, m.MountPath)
					}
					for _, v := range pod.Volumes {
						if v.Name != m.Name || v.ConfigMap == nil {
							continue
						}
						data, ok := configMaps[v.ConfigMap.Name]
						if !ok {
							return nil, fmt.Errorf("deploytest: %s: ConfigMap %s is not in the file", file, v.ConfigMap.Name)
						}
						for k, val := range data {
							switch {
							case m.SubPath == k:
								c.Files[m.MountPath] = []byte(val)
							case m.SubPath == "":
								c.Files[path.Join(m.MountPath, k)] = []byte(val)
							}
						}
					}
				}
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
