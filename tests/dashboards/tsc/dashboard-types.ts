// The shape a modelctl dashboard must have, from Grafana's own types: the classic
// dashboard JSON (`Dashboard`, `Panel`, `RowPanel`, `VariableModel` of @grafana/schema),
// each panel's options and field config from its plugin's generated types, and every
// target as a Prometheus query (`Prometheus`, @grafana/prometheus's dataquery.gen).
// JSON has no enums, so `Json<T>` turns each string enum into its values.
import type {
  AnnotationQuery,
  Dashboard,
  DataSourceRef,
  FieldConfigSource,
  Panel,
  RowPanel,
  VariableModel,
} from '@grafana/schema';
import type {
  FieldConfig as HeatmapFieldConfig,
  Options as HeatmapOptions,
} from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';
import type {
  FieldConfig as TimeSeriesFieldConfig,
  Options as TimeSeriesOptions,
} from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';
import type { Prometheus } from '@grafana/prometheus';

export type Json<T> = T extends string
  ? `${T}`
  : T extends Array<infer U>
    ? Array<Json<U>>
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

type Target = Omit<Prometheus, 'scopes' | 'adhocFilters'> & { datasource: DataSourceRef };

interface QueryPanel extends Omit<Panel, 'type' | 'options' | 'fieldConfig' | 'targets'> {
  title: string;
  description: string;
  datasource: DataSourceRef;
  gridPos: NonNullable<Panel['gridPos']>;
  targets: Target[];
}

interface TimeSeriesPanel extends QueryPanel {
  type: 'timeseries';
  options: TimeSeriesOptions;
  fieldConfig: FieldConfigSource<TimeSeriesFieldConfig>;
}

interface HeatmapPanel extends QueryPanel {
  type: 'heatmap';
  options: HeatmapOptions;
  fieldConfig: FieldConfigSource<HeatmapFieldConfig>;
}

interface Row extends Omit<RowPanel, 'type' | 'panels'> {
  type: 'row';
  panels: [];
}

// A Prometheus annotation as @grafana/prometheus's annotations.ts reads it: the query
// in `target` (prepareAnnotation), the event's title and tags from its labels
// (processEvents: titleFormat, tagKeys, textFormat, useValueForTime).
interface PrometheusAnnotation extends Omit<AnnotationQuery, 'target' | 'datasource'> {
  datasource: DataSourceRef;
  target: Pick<Prometheus, 'refId' | 'expr'>;
  titleFormat: string;
  tagKeys: string;
  textFormat: string;
  useValueForTime: boolean;
}

interface ModelctlDashboardShape extends Omit<Dashboard, 'panels' | 'templating' | 'annotations'> {
  uid: string;
  title: string;
  description: string;
  panels: Array<TimeSeriesPanel | HeatmapPanel | Row>;
  templating: { list: VariableModel[] };
  annotations: { list: PrometheusAnnotation[] };
}

export type ModelctlDashboard = Json<ModelctlDashboardShape>;
