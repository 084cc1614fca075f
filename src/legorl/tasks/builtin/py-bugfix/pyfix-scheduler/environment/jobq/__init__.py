from jobq.scheduler import Scheduler
