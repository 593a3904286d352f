"""Scale-out on Ray: engine replicas (Ray actors) behind one modelc front. Optional: `modelc[ray]`."""
