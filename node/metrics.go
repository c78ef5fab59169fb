package node

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

func natsDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("tally_nats_"+name, help, nil, nil)
}

var (
	descNATSConnected  = natsDesc("connected", "1 while the replica's NATS connection is up, 0 while it is down or reconnecting.")
	descNATSReconnects = natsDesc("reconnects_total", "Times the NATS connection was re-established since the replica started.")
	descNATSInMsgs     = natsDesc("in_msgs_total", "Messages received over the NATS connection.")
	descNATSOutMsgs    = natsDesc("out_msgs_total", "Messages sent over the NATS connection.")
	descNATSInBytes    = natsDesc("in_bytes_total", "Payload bytes received over the NATS connection.")
	descNATSOutBytes   = natsDesc("out_bytes_total", "Payload bytes sent over the NATS connection.")
)

// natsCollector exports the replica's NATS connection's state and traffic
// at scrape time, from nc.Status and nc.Stats.
type natsCollector struct{ nc *nats.Conn }

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNATSConnected, descNATSReconnects, descNATSInMsgs, descNATSOutMsgs, descNATSInBytes, descNATSOutBytes} {
		ch <- d
	}
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	connected := 0.0
	if c.nc.Status() == nats.CONNECTED {
		connected = 1
	}
	st := c.nc.Stats()
	ch <- prometheus.MustNewConstMetric(descNATSConnected, prometheus.GaugeValue, connected)
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{{descNATSReconnects, st.Reconnects}, {descNATSInMsgs, st.InMsgs}, {descNATSOutMsgs, st.OutMsgs},
		{descNATSInBytes, st.InBytes}, {descNATSOutBytes, st.OutBytes}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
	}
}
