//! A WebAssembly run's host state: its WASI context, memory limiter, disk quotas and
//! tool access; the guest's tool imports forward to [`ToolAccess`].

use super::quota::DiskGuard;
use crate::access::Access;
use crate::bindings::{
    GuestFetchError, GuestRequest, GuestResponse, NetworkHost, ToolCall, ToolsHost, TypesHost,
};
use crate::network::{FetchError, Request};
use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Caps linear memory and tables, and records the peak and whether the cap refused growth.
pub(crate) struct MemoryLimiter {
    pub cap: usize,
    pub peak: usize,
    pub refused: bool,
}

/// Table growth cap: far above what CPython needs, far below what would hurt the host.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.refused = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

pub(crate) struct HostState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub access: Access,
    pub disk: DiskGuard,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl ToolsHost for HostState {
    async fn call_tools(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> wasmtime::Result<Vec<Result<String, String>>> {
        self.access.tools.call_tools(calls).await
    }

    async fn list_tools(&mut self) -> wasmtime::Result<String> {
        self.access.tools.list_tools().await
    }

    async fn tool_schema(&mut self, name: String) -> wasmtime::Result<Result<String, String>> {
        self.access.tools.tool_schema(name).await
    }

    async fn tool_names(&mut self) -> wasmtime::Result<Vec<String>> {
        self.access.tools.tool_names().await
    }

    async fn search_tools(&mut self, query: String, limit: u32) -> wasmtime::Result<String> {
        self.access.tools.search_tools(query, limit).await
    }
}

impl NetworkHost for HostState {
    async fn fetch(
        &mut self,
        request: GuestRequest,
    ) -> wasmtime::Result<Result<GuestResponse, GuestFetchError>> {
        let mut answers = self.fetch_many(vec![request]).await?;
        Ok(answers
            .pop()
            .unwrap_or_else(|| Err(GuestFetchError::Failed("no answer".into()))))
    }

    async fn fetch_many(
        &mut self,
        requests: Vec<GuestRequest>,
    ) -> wasmtime::Result<Vec<Result<GuestResponse, GuestFetchError>>> {
        let Some(network) = &mut self.access.network else {
            let refused = || Err(GuestFetchError::Refused(crate::network::NO_NETWORK.into()));
            return Ok(requests.iter().map(|_| refused()).collect());
        };
        let requests = requests
            .into_iter()
            .map(|request| Request {
                method: request.method,
                url: request.url,
                headers: request.headers,
                body: request.body,
                timeout_ms: request.timeout_ms,
            })
            .collect();
        let answers = network.fetch_many(requests).await;
        Ok(answers
            .into_iter()
            .map(|answer| match answer {
                Ok(response) => Ok(GuestResponse {
                    status: response.status,
                    reason: response.reason,
                    headers: response.headers,
                    body: response.body,
                }),
                Err(FetchError::Refused(why)) => Err(GuestFetchError::Refused(why)),
                Err(FetchError::Timeout(why)) => Err(GuestFetchError::Timeout(why)),
                Err(FetchError::Failed(why)) => Err(GuestFetchError::Failed(why)),
            })
            .collect())
    }
}

/// The `types` interface has no functions; wasmtime still wants it implemented.
impl TypesHost for HostState {}
