"""Background re-layout of the physical family, invisible to readers.

Every operation is Prepare-Execute-Commit: prepare a plan you can print, execute it on
private staging branches (readers keep reading their pinned logical version), commit
it as ONE logical version that re-pins the rewritten snapshots.
"""

from governance.column_groups import (ColumnGroupError, ColumnGroupPlan, SplitPlan, plan_column_groups, plan_split,
                                      regroup, split_columns)
from governance.compaction import CompactionPlan, compact, plan_compaction
from governance.drop_batch import (BatchWrittenMeanwhileError, DropBatchPlan, NoSuchBatchError, drop_batch,
                                   plan_drop_batch)
from governance.leftovers import clean_leftovers
from governance.maintenance import MaintainReport, maintain
from governance.rebucket import RebucketError, RebucketPlan, plan_rebucket, rebucket
from governance.materialize import MaterializeError, MaterializePlan, materialize, plan_materialization, \
    refresh_materializations
from governance.retention import (
    RetentionError,
    RetentionPlan,
    RetentionPolicy,
    RetentionReport,
    apply_retention,
    plan_retention,
)

__all__ = ["RetentionPolicy", "RetentionPlan", "RetentionReport", "RetentionError", "plan_retention",
           "apply_retention", "maintain", "MaintainReport", "clean_leftovers", "drop_batch", "plan_drop_batch",
           "DropBatchPlan", "NoSuchBatchError", "BatchWrittenMeanwhileError", "materialize", "plan_materialization", "refresh_materializations",
           "MaterializePlan", "MaterializeError", "regroup", "plan_column_groups", "ColumnGroupPlan", "ColumnGroupError", "split_columns", "plan_split", "SplitPlan",
           "rebucket", "plan_rebucket", "RebucketPlan", "RebucketError", "compact", "plan_compaction",
           "CompactionPlan"]
