package batch

import "github.com/aiforge/aiforge/services/batch/fairshare"

// defaultScheduler is the fair-share scheduler.
func defaultScheduler(cfg Config) Scheduler {
	return fairshare.New(fairshare.Config{HalfLife: cfg.SchedulerHalfLife})
}
