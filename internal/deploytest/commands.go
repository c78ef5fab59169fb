package deploytest

import (
	"bufio"
	"errors"
	"fmt"
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
	// EnvValues are the values of Env the deployment spells out (not
	// secrets), where it does: TALLY_NATS_PASSWORD_FILE's path.
	EnvValues map[string]string
	// SecretFiles are the paths at which the process finds a Secret's
	// keys (their content is the operator's, not the repository's).
	SecretFiles []string
}

// Commands reads every tallyd command line under repo: the Dockerfile's
// CMD and HEALTHCHECK, deploy/compose/compose.yaml's services that run
// the image, deploy/systemd/*.service's ExecStart, and the containers of
// deploy/k8s/overlays/* (rendered) that run the image.
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
		Replicas *int `yaml:"replicas"`
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
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
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
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ConfigMapKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"configMapKeyRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// ReadK8s reads every object of a multi-document YAML file.
func ReadK8s(file string) ([]k8sObject, error) {
	objs, err := readObjects(file)
	if err != nil {
		return nil, err
	}
	return typed(objs)
}

func typed(objs []Object) ([]k8sObject, error) {
	out := make([]k8sObject, len(objs))
	for i, o := range objs {
		if err := o.Decode(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// k8sOverlays are the regions' kustomizations under deploy/k8s/overlays.
func k8sOverlays(repo string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(repo, "deploy", "k8s", "overlays", "*", "kustomization.yaml"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("deploytest: no deploy/k8s/overlays/*/kustomization.yaml (%v)", err)
	}
	for i, d := range dirs {
		dirs[i] = filepath.Dir(d)
	}
	return dirs, nil
}

// PodEnv is the environment Kubernetes gives container c of pod pod in
// namespace ns, with $(VAR) references expanded in order: values, the
// pod's name and namespace (fieldRef) and ConfigMap keys of configMaps
// (ConfigMap name, then key). A Secret's key (secretKeyRef) is named
// only: its value is "".
func podEnv(c container, pod, ns string, configMaps map[string]map[string]string) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		v := expand(e.Value, env)
		switch vf := e.ValueFrom; {
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.name":
			v = pod
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.namespace":
			v = ns
		case vf.ConfigMapKeyRef != nil:
			v = configMaps[vf.ConfigMapKeyRef.Name][vf.ConfigMapKeyRef.Key]
		}
		env[e.Name] = v
	}
	return env
}

// expand replaces $(VAR) with env's VAR where env has it, as Kubernetes
// does in env values, command and args.
func expand(s string, env map[string]string) string {
	for k, v := range env {
		s = strings.ReplaceAll(s, "$("+k+")", v)
	}
	return s
}

// k8sCommands: the containers of the regions' kustomizations
// (deploy/k8s/overlays/*, rendered by Kustomize) that run the tally image
// (its entrypoint, so args only), one command a pod of a StatefulSet
// (tally-0, tally-1, ...: $(POD_NAME) expanded), one for a Deployment.
// Their files are the keys of the ConfigMaps they mount and the paths
// of the Secret keys they mount (by name, empty); their environment the
// secrets they take whole (envFrom: the documented ones) and their env
// entries; their volumes the StatefulSet's claims.
func k8sCommands(repo string) ([]Command, error) {
	overlays, err := k8sOverlays(repo)
	if err != nil {
		return nil, err
	}
	var out []Command
	for _, dir := range overlays {
		rendered, err := Kustomize(dir)
		if err != nil {
			return nil, err
		}
		objs, err := typed(rendered)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(repo, dir)
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
			pods := []string{o.Metadata.Name + "-pod"}
			if o.Kind == "StatefulSet" {
				n := 1
				if o.Spec.Replicas != nil {
					n = *o.Spec.Replicas
				}
				pods = nil
				for i := range n {
					pods = append(pods, fmt.Sprintf("%s-%d", o.Metadata.Name, i))
				}
			}
			pod := o.Spec.Template.Spec
			claims := map[string]bool{}
			for _, vc := range o.Spec.VolumeClaimTemplates {
				claims[vc.Metadata.Name] = true
			}
			for _, podName := range pods {
				for _, ct := range pod.Containers {
					if !strings.HasPrefix(ct.Image, "tally:") {
						continue
					}
					if len(ct.Command) > 0 {
						return nil, fmt.Errorf("deploytest: %s: %s %s: want the image's entrypoint, no command", rel, o.Kind, o.Metadata.Name)
					}
					env := podEnv(ct, podName, o.Metadata.Namespace, configMaps)
					c := Command{
						Source: fmt.Sprintf("%s %s %s/%s pod %s container %s", filepath.ToSlash(rel), o.Kind, o.Metadata.Namespace, o.Metadata.Name, podName, ct.Name),
						Files:  map[string][]byte{}, Ports: []int{}, EnvValues: map[string]string{},
					}
					for _, a := range ct.Args {
						c.Args = append(c.Args, expand(a, env))
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
						if env[e.Name] != "" {
							c.EnvValues[e.Name] = env[e.Name]
						}
					}
					for _, m := range ct.VolumeMounts {
						if claims[m.Name] {
							c.Volumes = append(c.Volumes, m.MountPath)
						}
						for _, v := range pod.Volumes {
							if v.Name != m.Name {
								continue
							}
							if v.Secret != nil {
								for _, it := range v.Secret.Items {
									c.SecretFiles = append(c.SecretFiles, path.Join(m.MountPath, it.Path))
								}
							}
							if v.ConfigMap == nil {
								continue
							}
							data, ok := configMaps[v.ConfigMap.Name]
							if !ok {
								return nil, fmt.Errorf("deploytest: %s: ConfigMap %s is not rendered", rel, v.ConfigMap.Name)
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
