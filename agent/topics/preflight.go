package topics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Severity says what a preflight finding means for starting a mirror.
type Severity int

const (
	// Warn: mirroring works, but a named failure case is not covered
	// until the setting is changed.
	Warn Severity = iota + 1
	// Refuse: mirroring would break the invariant or fail outright; the
	// agent must not start mirroring into this cluster.
	Refuse
)

// String returns "WARN" or "REFUSE".
func (s Severity) String() string {
	switch s {
	case Warn:
		return "WARN"
	case Refuse:
		return "REFUSE"
	}
	return "Severity(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText makes a severity a JSON string in API responses.
func (s Severity) MarshalText() ([]byte, error) { return []byte(strings.ToLower(s.String())), nil }

// Cluster names used in findings.
const (
	Destination = "destination"
	Source      = "source"
)

// Finding is one result of Preflight.
type Finding struct {
	Severity Severity `json:"severity"`
	// Cluster is Destination or Source: where Setting lives.
	Cluster string `json:"cluster"`
	// Setting is the broker config (or, for protocol findings, "api NAME"
	// or "broker version") to change.
	Setting string `json:"setting"`
	// Value is the current value as the cluster reports it; a value the
	// brokers do not report is Kafka's default, marked "(default)".
	Value string `json:"value"`
	// Message says why it matters and what to change.
	Message string `json:"message"`
}

// String formats a finding for logs: "REFUSE destination SETTING=VALUE: MESSAGE".
func (f Finding) String() string {
	return fmt.Sprintf("%s %s %s=%s: %s", f.Severity, f.Cluster, f.Setting, f.Value, f.Message)
}

// Findings are Preflight's results, refusals first, in a deterministic order.
type Findings []Finding

// String formats the findings one per line.
func (fs Findings) String() string {
	if len(fs) == 0 {
		return "preflight: no findings"
	}
	lines := make([]string, len(fs))
	for i, f := range fs {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// Refusals returns the findings of severity Refuse.
func (fs Findings) Refusals() Findings {
	var out Findings
	for _, f := range fs {
		if f.Severity == Refuse {
			out = append(out, f)
		}
	}
	return out
}

// Refusal returns a *RefusalError listing the refusals, or nil if there are
// none.
func (fs Findings) Refusal() error {
	r := fs.Refusals()
	if len(r) == 0 {
		return nil
	}
	return &RefusalError{Findings: r}
}

// RefusalError is the error of Findings.Refusal.
type RefusalError struct {
	Findings Findings
}

func (e *RefusalError) Error() string {
	parts := make([]string, len(e.Findings))
	for i, f := range e.Findings {
		parts[i] = f.String()
	}
	return "preflight refused: " + strings.Join(parts, "; ")
}

// Kafka's defaults for the settings checked, used where a broker does not
// report one (older brokers; kfake reports only a handful of broker configs).
const (
	defaultTxnMaxTimeoutMs    = 900000    // transaction.max.timeout.ms
	defaultProducerIDExpiryMs = 86400000  // producer.id.expiration.ms
	defaultTxnIDExpiryMs      = 604800000 // transactional.id.expiration.ms
	defaultRetentionMs        = 604800000 // log.retention.hours=168
	defaultMinInsyncReplicas  = 1         // min.insync.replicas
	defaultReplicationFactor  = 1         // default.replication.factor
	lagBudgetMs               = 86400000  // what we add to retention for lag
	// minTxnIDExpiryMs is the transactional.id.expiration.ms below which
	// the preflight warns: Kafka's default.
	minTxnIDExpiryMs      = defaultTxnIDExpiryMs
	maxInt32              = 1<<31 - 1 // Kafka's int configs, and InitProducerId's timeout
	keyTxnMaxTimeout      = "transaction.max.timeout.ms"
	keyTxnIDExpiry        = "transactional.id.expiration.ms"
	keyProducerIDExpiry   = "producer.id.expiration.ms"
	keyTxnVerification    = "transaction.partition.verification.enable"
	keyDefaultReplication = "default.replication.factor"
	settingBrokerVersion  = "broker version"
)

// DefaultTxnTimeout is the timeout of the agent's destination transactions
// when the destination's brokers do not report transaction.max.timeout.ms:
// Kafka's default for it. The preflight warns when it is used.
const DefaultTxnTimeout = defaultTxnMaxTimeoutMs * time.Millisecond

// requiredAPI is a request the agent sends to a cluster.
type requiredAPI struct {
	key   int16
	min   int16
	since string // the Kafka release that introduced key at min
	why   string
}

// destinationAPIs are the requests the agent sends to the destination.
var destinationAPIs = []requiredAPI{
	{0, 3, "0.11", "the agent forwards record batches of magic 2, which only Produce v3+ carries"},
	{19, 4, "2.4", "destination topics are created with the destination's default replication factor (-1)"},
	{21, 0, "0.11", "DeleteRecords aligns a new mirror topic whose source log does not start at offset 0"},
	{22, 0, "0.11", "the idempotent and transactional writers need producer ids"},
	{24, 0, "0.11", "fillers and aborted source transactions are written through destination transactions"},
	{26, 0, "0.11", "fillers and aborted source transactions are written through destination transactions"},
	{37, 0, "1.0", "destination topics grow with their source"},
	{44, 0, "2.3", "the invariant's topic configs are set without touching the others"},
	{61, 0, "2.8", "after a restart the writers' sequences are read back from the destination"},
	{65, 0, "3.0", "after a restart the agent's transactions are settled before writing"},
}

// sourceAPIs are the requests the agent sends to the source.
var sourceAPIs = []requiredAPI{
	{1, 4, "0.11", "the agent fetches read_committed with the aborted-transactions list"},
	{2, 2, "0.11", "the agent reads the last stable offset"},
}

// cluster is what Preflight read from one cluster.
type cluster struct {
	name string
	// bootstrap is the cluster's bootstrap servers as the fixing
	// commands of findings name them, "<destination>" when unknown.
	bootstrap string
	brokers   []int32 // sorted
	versions  map[int32]kadm.BrokerApiVersions
	// configs per broker; nil when the cluster did not let us read them.
	configs map[int32]map[string]kadm.Config
	// unreachable maps brokers that did not answer ApiVersions to the
	// error; they are left out of every check.
	unreachable map[int32]error
}

// Report is what Check found: the findings, and the agent's settings that
// the destination's broker configs decide.
type Report struct {
	Findings Findings
	// TxnTimeout is the timeout of the agent's destination transactions
	// (InitProducerId's TransactionTimeoutMillis): the lowest
	// transaction.max.timeout.ms of the destination's brokers, which is
	// the longest that every transaction coordinator accepts. The
	// transaction holding an aborted source transaction's records stays
	// open until the agent reaches that transaction's marker on the
	// source, so it gets the longest allowed (design-review B8).
	// DefaultTxnTimeout when no broker reports the setting.
	TxnTimeout time.Duration
	// TxnTimeoutFrom says where TxnTimeout comes from, for describe.
	TxnTimeoutFrom string
}

// CheckOptions are Check's inputs besides the clusters.
type CheckOptions struct {
	// Topics names the mirror topics whose source retention matters;
	// none means every non-internal source topic.
	Topics []string
	// DestinationBootstrap is named in the kafka-configs.sh commands of
	// the findings; "<destination>" stands in when it is empty.
	DestinationBootstrap []string
}

// Preflight is Check with only topics set, for callers that need the
// findings alone.
func Preflight(ctx context.Context, dst, src *kadm.Client, topics ...string) (Findings, error) {
	r, err := Check(ctx, dst, src, CheckOptions{Topics: topics})
	return r.Findings, err
}

// Check checks the destination cluster (and the source where a check
// compares the two) before mirroring starts (DESIGN §3, design-review §4e),
// and chooses the agent's destination transaction timeout from the
// destination's transaction.max.timeout.ms (Report.TxnTimeout).
//
// It refuses:
//   - brokers without the requests the agent sends (Produce v3+, that is
//     magic-2 batches, and the others in destinationAPIs and sourceAPIs);
//   - destinations older than Kafka 3.6, which do not know the topic configs
//     message.timestamp.before/after.max.ms that every mirror topic sets;
//   - destinations answering like Kafka 3.6 with
//     transaction.partition.verification.enable=true: 3.6.0 then fails
//     compressed transactional appends (InvalidRecordException or
//     UNKNOWN_SERVER_ERROR, KAFKA-15653), which fails the partitions that
//     mirror a transaction. The protocol cannot
//     tell 3.6.0 from 3.6.1 and 3.6.2 (same API versions), so every 3.6 broker
//     with verification on is refused; turning it off is a dynamic change,
//     and on mirror topics, which only the agent writes, verification
//     protects little;
//   - destinations whose transaction.max.timeout.ms is below the source's: a
//     destination transaction holding an aborted source transaction's
//     records stays open at least as long as that source transaction, and a
//     timeout abort writes an unplanned marker (design-review B8).
//
// It warns:
//   - when the source's transaction.max.timeout.ms cannot be read, or the
//     destination's is not reported (the agent then uses DefaultTxnTimeout);
//   - when the destination's producer.id.expiration.ms is below the longest
//     source retention: dedup of a killed agent's late requests depends on
//     the broker keeping the writer's state, which expires by record
//     timestamp (design-review B3);
//   - when the destination's transactional.id.expiration.ms is below Kafka's
//     default of 7 days: the agent's transactional ids of a partition without
//     source transactions stay idle, and an expired one gets a new producer
//     id at its next filler, recorded in the state topic;
//   - when the destination creates replicated topics with
//     min.insync.replicas below 2 (design-review §1.8).
//
// log.message.timestamp.after.max.ms and the other timestamp defaults are not
// checked: every mirror topic sets its own.
//
// The error is for failing to read a cluster, not for findings; see
// Findings.Refusal.
func Check(ctx context.Context, dst, src *kadm.Client, o CheckOptions) (Report, error) {
	d, err := readCluster(ctx, dst, Destination)
	if err != nil {
		return Report{}, err
	}
	if d.configs == nil {
		// The agent administers the destination: it must be able to
		// read its configs.
		return Report{}, fmt.Errorf("reading the destination's broker configs: not authorized; the agent needs DESCRIBE_CONFIGS on the destination cluster")
	}
	d.bootstrap = "<destination>"
	if len(o.DestinationBootstrap) > 0 {
		d.bootstrap = strings.Join(o.DestinationBootstrap, ",")
	}
	s, err := readCluster(ctx, src, Source)
	if err != nil {
		return Report{}, err
	}

	var fs Findings
	for _, c := range []*cluster{d, s} {
		for _, b := range slices.Sorted(maps.Keys(c.unreachable)) {
			fs = append(fs, Finding{Warn, c.name, "broker " + strconv.Itoa(int(b)), "unreachable", fmt.Sprintf(
				"the broker did not answer ApiVersions (%v), so it was not checked; the check runs again when the agent reconnects", c.unreachable[b])})
		}
	}
	if s.configs == nil {
		fs = append(fs, Finding{Warn, Source, "broker configs", "unreadable",
			"not authorized to describe the source's broker configs (DESCRIBE_CONFIGS on the cluster); checks against source values used Kafka's defaults"})
	}
	fs = append(fs, checkAPIs(d, destinationAPIs)...)
	fs = append(fs, checkAPIs(s, sourceAPIs)...)
	fs = append(fs, checkVersion(d)...)
	r := Report{}
	var txn []Finding
	r.TxnTimeout, r.TxnTimeoutFrom, txn = checkTxnTimeout(d, s)
	fs = append(fs, txn...)
	fs = append(fs, checkTxnIDExpiry(d)...)
	expiry, err := checkProducerExpiry(ctx, src, d, s, o.Topics)
	if err != nil {
		return Report{}, err
	}
	fs = append(fs, expiry...)
	fs = append(fs, checkMinInsync(d)...)

	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(b.Severity, a.Severity),
			cmp.Compare(a.Cluster, b.Cluster),
			cmp.Compare(a.Setting, b.Setting),
			cmp.Compare(a.Message, b.Message),
		)
	})
	r.Findings = fs
	return r, nil
}

// alterDefault is the kafka-configs.sh command that sets a dynamic broker
// config on every broker of the cluster.
func (c *cluster) alterDefault(key string, value any) string {
	return fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --entity-type brokers --entity-default --alter --add-config %s=%v", c.bootstrap, key, value)
}

// reports says whether any broker of the cluster reports key.
func (c *cluster) reports(key string) bool {
	for _, b := range c.brokers {
		if cfg, ok := c.configs[b][key]; ok && cfg.Value != nil {
			return true
		}
	}
	return false
}

// readCluster reads every broker's API versions and broker configs.
func readCluster(ctx context.Context, cl *kadm.Client, name string) (*cluster, error) {
	vs, err := cl.ApiVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking the %s cluster for its brokers: %w", name, err)
	}
	c := &cluster{name: name, versions: map[int32]kadm.BrokerApiVersions(vs), unreachable: map[int32]error{}}
	// A broker that is down is reported and skipped rather than failing
	// the whole check: one broker in maintenance must not stop every
	// mirror, and the check runs again at the next connection.
	var lastErr error
	for _, b := range slices.Sorted(maps.Keys(c.versions)) {
		if err := c.versions[b].Err; err != nil {
			c.unreachable[b], lastErr = err, err
			continue
		}
		c.brokers = append(c.brokers, b)
	}
	if len(c.brokers) == 0 {
		if lastErr != nil {
			return nil, fmt.Errorf("asking the %s's brokers for their API versions: none answered: %w", name, lastErr)
		}
		return nil, fmt.Errorf("the %s cluster reported no brokers", name)
	}

	rcs, err := cl.DescribeBrokerConfigs(ctx, c.brokers...)
	if _, denied := errors.AsType[*kadm.AuthError](err); denied {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s's broker configs: %w", name, err)
	}
	c.configs = make(map[int32]map[string]kadm.Config, len(rcs))
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("reading the configs of %s broker %s: %w%s", name, rc.Name, rc.Err, detail(rc.ErrMessage))
		}
		id, err := strconv.ParseInt(rc.Name, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("reading the %s's broker configs: unexpected resource name %q", name, rc.Name)
		}
		m := make(map[string]kadm.Config, len(rc.Configs))
		for _, cfg := range rc.Configs {
			m[cfg.Key] = cfg
		}
		c.configs[int32(id)] = m
	}
	return c, nil
}

// numSetting is a numeric broker config aggregated over a cluster's brokers.
type numSetting struct {
	value    int64
	text     string  // as reported, "(default)" marked when not reported
	brokers  []int32 // the brokers that have value
	reported bool
}

// extreme returns the setting on the broker(s) where it is the lowest
// (lowest=true) or the highest. Brokers that do not report it, or report
// something that is not a number, count with Kafka's default def.
func (c *cluster) extreme(key string, def int64, lowest bool) numSetting {
	var out numSetting
	for i, b := range c.brokers {
		v, text, reported := def, strconv.FormatInt(def, 10)+" (default)", false
		if cfg, ok := c.configs[b][key]; ok && cfg.Value != nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(*cfg.Value), 10, 64); err == nil {
				v, text, reported = n, *cfg.Value, true
			}
		}
		switch {
		case i == 0 || (lowest && v < out.value) || (!lowest && v > out.value):
			out = numSetting{value: v, text: text, brokers: []int32{b}, reported: reported}
		case v == out.value:
			out.brokers = append(out.brokers, b)
		}
	}
	return out
}

// checkAPIs refuses a cluster whose brokers lack a request the agent sends.
func checkAPIs(c *cluster, apis []requiredAPI) []Finding {
	var fs []Finding
	for _, api := range apis {
		var short []int32
		best := int16(-1)
		for _, b := range c.brokers {
			v := c.versions[b]
			maxV, ok := v.KeyMaxVersion(api.key)
			minV, _ := v.KeyMinVersion(api.key)
			if !ok || maxV < api.min || minV > maxV {
				short = append(short, b)
				if ok && maxV > best {
					best = maxV
				}
			}
		}
		if len(short) == 0 {
			continue
		}
		name := kmsg.NameForKey(api.key)
		value := "missing"
		if best >= 0 {
			value = "v" + strconv.Itoa(int(best))
		}
		fs = append(fs, Finding{Refuse, c.name, "api " + name, value, fmt.Sprintf(
			"%s: the agent needs %s v%d+ (Kafka %s+), but broker(s) %v do not offer it; upgrade them",
			api.why, name, api.min, api.since, short)})
	}
	return fs
}

// answersLike36 reports whether a broker's API versions are those of Kafka
// 3.6: AddPartitionsToTxn v4 arrived in 3.6 (KIP-890) and Produce v10 in 3.7.
// Patch releases do not change API versions, so 3.6.0, 3.6.1 and 3.6.2 look
// the same.
func answersLike36(v kadm.BrokerApiVersions) bool {
	apt, _ := v.KeyMaxVersion(24)
	produce, _ := v.KeyMaxVersion(0)
	return apt == 4 && produce == 9
}

// olderThan36 reports whether a broker predates Kafka 3.6.
func olderThan36(v kadm.BrokerApiVersions) bool {
	apt, ok := v.KeyMaxVersion(24)
	return ok && apt < 4
}

// checkVersion refuses destination brokers whose version breaks the mirror.
func checkVersion(d *cluster) []Finding {
	var old, verifying []int32
	oldAPT := int16(4)
	for _, b := range d.brokers {
		v := d.versions[b]
		switch {
		case olderThan36(v):
			old = append(old, b)
			apt, _ := v.KeyMaxVersion(24)
			oldAPT = min(oldAPT, apt)
		case answersLike36(v):
			on := true // the 3.6 default
			if cfg, ok := d.configs[b][keyTxnVerification]; ok && cfg.Value != nil {
				on = strings.EqualFold(strings.TrimSpace(*cfg.Value), "true")
			}
			if on {
				verifying = append(verifying, b)
			}
		}
	}
	var fs []Finding
	if len(old) > 0 {
		// The version is named by the API version that gives it away,
		// not by a guess from the whole ApiVersions answer: guesses are
		// wrong for brokers that leave out requests they do not serve.
		value := fmt.Sprintf("before 3.6 (AddPartitionsToTxn v%d)", oldAPT)
		fs = append(fs, Finding{Refuse, Destination, settingBrokerVersion, value, fmt.Sprintf(
			"broker(s) %v predate Kafka 3.6 (no AddPartitionsToTxn v4): they reject the topic configs message.timestamp.before.max.ms and "+
				"message.timestamp.after.max.ms (KIP-937) that every mirror topic sets, and the mirror is verified against 3.6-4.2 only; upgrade them to 3.7 or later",
			old)})
	}
	if len(verifying) > 0 {
		fs = append(fs, Finding{Refuse, Destination, keyTxnVerification, "true", fmt.Sprintf(
			"broker(s) %v answer like Kafka 3.6, and 3.6.0 with transaction verification on fails compressed transactional appends "+
				"(KAFKA-15653, fixed in 3.6.1); API versions cannot tell 3.6.0 from 3.6.1, so turn verification off: %s, or upgrade to 3.7 or later",
			verifying, d.alterDefault(keyTxnVerification, false))})
	}
	return fs
}

// checkTxnTimeout chooses the agent's destination transaction timeout and
// checks it against the source's transactions. The agent copies only below
// the source's last stable offset, so a destination transaction (an aborted
// source transaction being copied) stays open as long as that source
// transaction did, and longer while the source has an older transaction
// undecided, up to the source's transaction.max.timeout.ms, plus lag and
// restarts; if the destination times it out first, the coordinator writes
// an abort marker at an arbitrary offset and the partition fails
// (design-review B8). The timeout is therefore the longest the destination
// allows, its lowest transaction.max.timeout.ms (any broker can be a
// transactional id's coordinator; asking for more fails InitProducerId with
// INVALID_TRANSACTION_TIMEOUT), and a destination that allows less than
// the source is refused. transaction.max.timeout.ms is a static broker
// config.
func checkTxnTimeout(d, s *cluster) (time.Duration, string, []Finding) {
	var fs []Finding
	dst := d.extreme(keyTxnMaxTimeout, defaultTxnMaxTimeoutMs, true)
	ms := min(max(dst.value, 1), maxInt32)
	from := fmt.Sprintf("destination %s=%s (lowest, on broker(s) %v)", keyTxnMaxTimeout, dst.text, dst.brokers)
	if !d.reports(keyTxnMaxTimeout) {
		ms = defaultTxnMaxTimeoutMs
		from = fmt.Sprintf("default (Kafka's %s; the destination's brokers do not report it)", keyTxnMaxTimeout)
		fs = append(fs, Finding{Warn, Destination, keyTxnMaxTimeout, "unreported", fmt.Sprintf(
			"destination broker(s) %v do not report %s, so the agent opens its destination transactions with Kafka's default of %s; if a broker allows less, "+
				"every partition fails to initialize its transactional ids (INVALID_TRANSACTION_TIMEOUT) and retries without end, and if they allow more, "+
				"a mirrored aborted transaction is aborted earlier than it had to be. Check the setting in server.properties of the destination brokers",
			d.brokers, keyTxnMaxTimeout, humanMs(ms))})
	}
	timeout := time.Duration(ms) * time.Millisecond

	if !s.reports(keyTxnMaxTimeout) {
		fs = append(fs, Finding{Warn, Source, keyTxnMaxTimeout, "unreadable", fmt.Sprintf(
			"the source's %s could not be read (it needs DESCRIBE_CONFIGS on the source cluster), so it was not compared with the destination's %s: "+
				"if the source allows longer transactions, the destination aborts a mirrored aborted transaction at its limit, at an unplanned offset, "+
				"and the partition fails. Make sure the source's is at most %d",
			keyTxnMaxTimeout, humanMs(ms), ms)})
		return timeout, from, fs
	}
	src := s.extreme(keyTxnMaxTimeout, defaultTxnMaxTimeoutMs, false)
	if ms >= src.value {
		return timeout, from, fs
	}
	want := min(satAdd(src.value, src.value), maxInt32)
	fs = append(fs, Finding{Refuse, Destination, keyTxnMaxTimeout, dst.text, fmt.Sprintf(
		"destination broker(s) %v allow transactions of %s but source broker(s) %v allow %s: a destination transaction holding an aborted source "+
			"transaction's records stays open until the agent reaches that transaction's marker on the source, at least as long as the source transaction ran, "+
			"and the destination would abort it after %s, writing a marker at an unplanned offset, which fails the partition. "+
			"Add the line %s=%d (at least %d; twice the source's leaves room for an older open source transaction, lag and restarts) "+
			"to server.properties of every destination broker and restart them one at a time: the setting is static, kafka-configs.sh cannot change it. "+
			"Or lower the source's to at most %d",
		dst.brokers, humanMs(ms), src.brokers, humanMs(src.value), humanMs(ms), keyTxnMaxTimeout, want, src.value, ms)})
	return timeout, from, fs
}

// checkTxnIDExpiry warns when the destination forgets idle transactional ids
// sooner than Kafka's default. Each mirror partition has two,
// kmirror.MIRROR.TOPIC.N.fill and .abort, initialized when the partition
// starts and idle while its source partition has no transaction markers,
// aborted transactions or compaction holes. The coordinator removes an id
// idle for transactional.id.expiration.ms; the partition's next filler or
// aborted transaction then gets INVALID_PRODUCER_ID_MAPPING, and the
// agent initializes the id again: a new producer id, one more recorded for
// the partition in the state topic (partition.OwnedProducers).
// transactional.id.expiration.ms is a static broker config.
func checkTxnIDExpiry(d *cluster) []Finding {
	dst := d.extreme(keyTxnIDExpiry, defaultTxnIDExpiryMs, true)
	if dst.value >= minTxnIDExpiryMs {
		return nil
	}
	return []Finding{{Warn, Destination, keyTxnIDExpiry, dst.text, fmt.Sprintf(
		"destination broker(s) %v forget a transactional id after %s without a transaction: the agent's filler and abort transactional ids of a partition "+
			"(kmirror.MIRROR.TOPIC.N.fill and .abort) stay idle while its source partition has no transaction markers, aborted transactions or compaction holes, "+
			"and once the destination has forgotten one, the partition's next filler or aborted transaction gets INVALID_PRODUCER_ID_MAPPING and the "+
			"agent initializes the id again, with a new producer id that the state topic keeps for the partition from then on. Add the line %s=%d (%s, Kafka's default; more if partitions can go longer without transactions) "+
			"to server.properties of every destination broker and restart them one at a time (the setting is static)",
		dst.brokers, humanMs(dst.value), keyTxnIDExpiry, minTxnIDExpiryMs, humanMs(minTxnIDExpiryMs))}}
}

// retention is the longest time the source keeps the records of the mirror
// topics.
type retention struct {
	ms        int64  // longest finite retention
	msTopic   string // the topic with it; "" when it is the broker default
	forever   []string
	readError string // why the topics' configs were not read
}

// checkProducerExpiry warns when the destination forgets its writers' state
// before the agent stops copying records of that age. The broker expires a
// producer id whose last batch's timestamp (the record's, on CreateTime
// topics) is older than producer.id.expiration.ms; afterwards it accepts any
// sequence, so a late request of a killed agent is appended again instead of
// being deduplicated (design-review B3). Copying a backlog older than the
// setting therefore loses that protection.
func checkProducerExpiry(ctx context.Context, src *kadm.Client, d, s *cluster, topics []string) ([]Finding, error) {
	r, err := sourceRetention(ctx, src, s, topics)
	if err != nil {
		return nil, err
	}
	dst := d.extreme(keyProducerIDExpiry, defaultProducerIDExpiryMs, true)

	var fs []Finding
	if r.readError != "" {
		fs = append(fs, Finding{Warn, Source, "topic configs", "unreadable", r.readError})
	}
	if dst.value < r.ms {
		where := "the source's default retention"
		if r.msTopic != "" {
			where = fmt.Sprintf("source topic %q", r.msTopic)
		}
		want := satAdd(r.ms, lagBudgetMs)
		fs = append(fs, Finding{Warn, Destination, keyProducerIDExpiry, dst.text, fmt.Sprintf(
			"destination broker(s) %v forget a writer's state after %s without a newer record, but %s keeps records for %s: while the agent copies records "+
				"older than %s, a late request of a killed agent can be appended twice and shift offsets. It is dynamic: %s (retention plus one day of lag)",
			dst.brokers, humanMs(dst.value), where, humanMs(r.ms), humanMs(dst.value), d.alterDefault(keyProducerIDExpiry, want))})
	}
	if len(r.forever) > 0 {
		names := r.forever
		more := ""
		if len(names) > 5 {
			names, more = names[:5], fmt.Sprintf(" and %d more", len(r.forever)-5)
		}
		fs = append(fs, Finding{Warn, Destination, keyProducerIDExpiry, dst.text, fmt.Sprintf(
			"source topic(s) %q%s keep records without a time limit (retention.ms=-1 or cleanup.policy without delete): while the agent copies their records older than %s, "+
				"a late request of a killed agent can be appended twice and shift offsets. Before the initial copy, raise it to the age of the oldest record to mirror: %s",
			names, more, humanMs(dst.value), d.alterDefault(keyProducerIDExpiry, "<milliseconds>"))})
	}
	return fs, nil
}

// sourceRetention finds how long the source keeps the records of topics (all
// non-internal topics when empty).
func sourceRetention(ctx context.Context, src *kadm.Client, s *cluster, topics []string) (retention, error) {
	// The broker default, for a source without topics: log.retention.ms
	// wins over .minutes and .hours, as in Kafka.
	r := retention{ms: defaultRetentionMs}
	for _, u := range []struct {
		key  string
		unit int64
	}{{"log.retention.hours", 3600000}, {"log.retention.minutes", 60000}, {"log.retention.ms", 1}} {
		if v := s.extreme(u.key, -2, false); v.reported {
			r.ms = v.value
			if v.value >= 0 {
				r.ms = satMul(v.value, u.unit)
			}
		}
	}
	if r.ms < 0 {
		r.ms, r.forever = 0, []string{"(broker default log.retention.ms=-1)"}
	}

	if len(topics) == 0 {
		td, err := src.ListTopics(ctx)
		if _, denied := errors.AsType[*kadm.AuthError](err); denied {
			r.readError = "not authorized to list the source's topics; retention was taken from the source's broker defaults"
			return r, nil
		}
		if err != nil {
			return r, fmt.Errorf("listing the source's topics: %w", err)
		}
		// Names starting with "__" are never mirrored (the state
		// topics of agents mirroring into this cluster among them,
		// which keep records forever), whether or not the broker marks
		// them internal.
		for _, n := range td.Names() {
			if !strings.HasPrefix(n, "__") {
				topics = append(topics, n)
			}
		}
	}
	if len(topics) == 0 {
		return r, nil
	}
	rcs, err := src.DescribeTopicConfigs(ctx, topics...)
	if _, denied := errors.AsType[*kadm.AuthError](err); denied {
		r.readError = "not authorized to describe the source topics' configs; retention was taken from the source's broker defaults"
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("reading the configs of the source's topics: %w", err)
	}

	// Topics decide for themselves: the broker default above only stands
	// in when no topic could be read.
	r = retention{}
	slices.SortFunc(rcs, func(a, b kadm.ResourceConfig) int { return cmp.Compare(a.Name, b.Name) })
	for _, rc := range rcs {
		if rc.Err != nil {
			continue // deleted since listing, or not a mirror topic yet
		}
		ms, policy := int64(defaultRetentionMs), "delete"
		for _, c := range rc.Configs {
			switch c.Key {
			case keyRetentionMs:
				if n, err := strconv.ParseInt(c.MaybeValue(), 10, 64); err == nil {
					ms = n
				}
			case keyCleanupPolicy:
				policy = c.MaybeValue()
			}
		}
		if ms < 0 || !slices.Contains(policySet(policy), "delete") {
			r.forever = append(r.forever, rc.Name)
			continue
		}
		if ms > r.ms {
			r.ms, r.msTopic = ms, rc.Name
		}
	}
	return r, nil
}

// checkMinInsync warns when topics created with the destination's default
// replication factor get min.insync.replicas below 2: acks=all is then
// satisfied by the leader alone, and a leader failover can lose records the
// agent counted as written, which shifts later offsets (design-review §1.8).
// Single-replica destinations (test clusters) are not warned about: there is
// no other replica to fail over to.
func checkMinInsync(d *cluster) []Finding {
	rf := d.extreme(keyDefaultReplication, defaultReplicationFactor, true)
	replicas := min(rf.value, int64(len(d.brokers)+len(d.unreachable)))
	mir := d.extreme(keyMinInsyncReplicas, defaultMinInsyncReplicas, true)
	if replicas <= 1 || mir.value >= 2 {
		return nil
	}
	return []Finding{{Warn, Destination, keyMinInsyncReplicas, mir.text, fmt.Sprintf(
		"destination broker(s) %v create topics with %d replicas and min.insync.replicas=%d: a write acknowledged by the leader alone can be lost "+
			"in a leader failover, which shifts the offsets of everything mirrored after it. It is dynamic: %s",
		mir.brokers, replicas, mir.value, d.alterDefault(keyMinInsyncReplicas, 2))}}
}

// humanMs formats milliseconds in the largest unit that divides them.
func humanMs(ms int64) string {
	for _, u := range []struct {
		ms   int64
		name string
	}{{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}} {
		if ms != 0 && ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// satAdd and satMul are addition and multiplication of non-negative values
// that stop at Long.MAX_VALUE instead of overflowing (retention can be close
// to it).
func satAdd(a, b int64) int64 {
	if a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if b != 0 && a > (1<<63-1)/b {
		return 1<<63 - 1
	}
	return a * b
}
