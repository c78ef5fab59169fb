package replication

// The subjects a replica uses, for whoever grants them (the NATS
// permissions of internal/natsperm).

// DeltaSubject is the subject replica's fast path publishes on.
func DeltaSubject(region, replica string) string { return deltaSubject(region, replica) }

// IDSubject is the subject replica's identity announcements use.
func IDSubject(replica string) string { return idSubject(replica) }

// AERequestPrefix is the prefix of the anti-entropy requests addressed to
// replica: only replica may subscribe to <prefix>.>.
func AERequestPrefix(replica string) string { return subjectAEPrefix + token(replica) }

// AERequestSubjects are the subjects of anti-entropy requests to any
// replica, as NATS wildcards.
func AERequestSubjects() []string {
	return []string{subjectAEPrefix + "*.digests", subjectAEPrefix + "*.page", subjectAEPrefix + "*.history"}
}
