package natsperm

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

//go:embed conf.tmpl
var confTemplate string

// Shipped is the deployment configs/nats/*.conf describe: each region and
// its replicas.
var Shipped = []Region{{"us", []string{"us-1"}}, {"eu", []string{"eu-1"}}, {"ap", []string{"ap-1"}}}

// Region is one region of a deployment and its replicas.
type Region struct {
	Name     string
	Replicas []string
}

// Conf renders the nats-server configuration of region r of a deployment
// of regions, as shipped in configs/nats/<region>.conf.
func Conf(r Region, regions []Region) ([]byte, error) {
	var names []string
	for _, o := range regions {
		names = append(names, o.Name)
	}
	var users strings.Builder
	for _, u := range Users(r.Name, r.Replicas, names) {
		writeUser(&users, u)
	}
	t, err := template.New("conf").Parse(confTemplate)
	if err != nil {
		return nil, fmt.Errorf("natsperm: template: %w", err)
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]string{"Region": r.Name, "RegionEnv": envName(r.Name), "Users": users.String()})
	if err != nil {
		return nil, fmt.Errorf("natsperm: render %s: %w", r.Name, err)
	}
	return b.Bytes(), nil
}

// writeUser writes one entry of an account's users list.
func writeUser(b *strings.Builder, u User) {
	const in = "      "
	fmt.Fprintf(b, "%s{\n%s  user: %s\n%s  password: $%s\n", in, in, u.Name, in, u.PasswordEnv)
	if u.Perms == nil {
		fmt.Fprintf(b, "%s  # no permissions: everything (bootstrap, retire, stream limits)\n%s}\n", in, in)
		return
	}
	fmt.Fprintf(b, "%s  permissions: {\n", in)
	list := func(name string, rules []Rule) {
		fmt.Fprintf(b, "%s    %s: {\n%s      allow: [\n", in, name, in)
		for _, r := range rules {
			for _, line := range wrap(r.Why, 62) {
				fmt.Fprintf(b, "%s        # %s\n", in, line)
			}
			for _, s := range r.Subjects {
				fmt.Fprintf(b, "%s        %q\n", in, s)
			}
		}
		fmt.Fprintf(b, "%s      ]\n%s    }\n", in, in)
	}
	list("publish", u.Perms.Publish)
	if u.Perms.AllowResponses {
		fmt.Fprintf(b, "%s    allow_responses: true\n", in)
	}
	list("subscribe", u.Perms.Subscribe)
	fmt.Fprintf(b, "%s  }\n%s}\n", in, in)
}

// wrap splits s into lines of at most width bytes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
