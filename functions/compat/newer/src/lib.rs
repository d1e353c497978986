//! A component built against a host API newer than any host offers today: `sluice:gpu`
//! 1.3.0 (invented), whose `artifacts` interface gained a call (`sizes`) that this host
//! lacks. The host must refuse it at deploy with `host_api_unsupported`, naming
//! `sluice:gpu/artifacts@1.3.0`. The WIT is inline and holds only what the component
//! uses; `io` is 1.2.0's, unchanged.

#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    inline: r#"
package sluice:gpu@1.3.0;

interface io {
    variant io-data {
        %f32(list<f32>),
        f16(list<u16>),
        bf16(list<u16>),
        i32(list<s32>),
        i64(list<s64>),
        %u8(list<u8>),
        bytes(list<list<u8>>),
    }

    record io-tensor {
        name: string,
        shape: list<u64>,
        data: io-data,
    }

    variant run-error {
        invalid-input(string),
        failed(string),
    }
}

interface artifacts {
    @since(version = 1.3.0)
    sizes: func() -> list<u64>;
}

world inference {
    import artifacts;
    use io.{io-tensor, run-error};

    export run: func(inputs: list<io-tensor>) -> result<list<io-tensor>, run-error>;
}
"#,
    world: "inference",
});

use sluice::gpu::io::IoData;

struct Newer;

impl Guest for Newer {
    fn run(_inputs: Vec<IoTensor>) -> Result<Vec<IoTensor>, RunError> {
        let sizes = sluice::gpu::artifacts::sizes();
        Ok(vec![IoTensor {
            name: "sizes".into(),
            shape: vec![sizes.len() as u64],
            data: IoData::I64(sizes.into_iter().map(|s| s as i64).collect()),
        }])
    }
}

export!(Newer);
