"""What runs the pipeline's processes on this host: the embedded Kafka broker (:mod:`.broker`)
and a three-broker cluster (:mod:`.cluster`), local worker pools and reward watchers
(:mod:`.local`), one base for supervised children (:mod:`.reaped_child`) and for the
tools run as children, Jaeger and Prometheus (:mod:`.child`), a service's
run-until-stopped shell (:mod:`.service`) and free loopback ports (:mod:`.ports`)."""
